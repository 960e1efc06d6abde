"""The user namespace manager (upstream pkg/kubelet/userns/userns_manager.go): the slots of `allocator` held in
memory, each pod's in ``<root-dir>/pods/<uid>/userns``, restored from the pods' directories when built.

Every method blocks (files, fsync, a subprocess): call them in a thread. One lock makes each change and its file
whole, as upstream's mutex does, so two pods never get one range.
"""

from __future__ import annotations

import logging
import os
import pwd
import random
import shutil
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

from cri_client import types as cri
from kopflet import checkpointmanager, gotext, paths
from kopflet.userns import allocator
from kopflet.userns.allocator import Allocations, UsernsError

logger = logging.getLogger(__name__)

GETSUBIDS_TIMEOUT = 30.0
"""getsubids may ask a remote service (sssd, LDAP): never wait on it for ever."""


def read_kubelet_mappings(ids_per_pod: int = allocator.DEFAULT_IDS_PER_POD) -> tuple[int, int]:
    """Upstream getKubeletMappings: the ``kubelet`` user's subordinate IDs when that user exists and ``getsubids``
    is installed (the same single range for UIDs and GIDs), else the default (every ID from `ids_per_pod` up).
    (first ID, length); UsernsError when getsubids fails or its UID and GID answers differ: upstream cannot tell
    an unreachable remote source from an absent entry, so it does not start."""
    user = allocator.KUBELET_USER
    try:
        pwd.getpwnam(user)
    except KeyError:
        logger.debug(f"user namespaces: user {user} not found, using default mappings")
        return allocator.default_kubelet_mappings(ids_per_pod)
    command = shutil.which("getsubids")
    if command is None:
        logger.info("user namespaces: executable getsubids not found, using default mappings")
        return allocator.default_kubelet_mappings(ids_per_pod)

    def run(*args: str) -> str:
        return subprocess.run([command, *args], capture_output=True, text=True, check=True,
                              timeout=GETSUBIDS_TIMEOUT).stdout

    try:
        uids = run(user)
    except (OSError, subprocess.SubprocessError) as exc:
        raise UsernsError(f"error retrieving additional uids for user {gotext.go_quote(user)}: {exc}") from None
    try:
        gids = run("-g", user)
    except (OSError, subprocess.SubprocessError):
        raise UsernsError(f"error retrieving additional gids for user {gotext.go_quote(user)}") from None
    if uids != gids:
        raise UsernsError(f"mismatched subuids and subgids for user {gotext.go_quote(user)}")
    return allocator.parse_getsubids_output(uids)


def list_pods_from_disk(layout: paths.Layout) -> list[str]:
    """Upstream listPodsFromDisk: the UIDs that have a directory under ``<root-dir>/pods``."""
    return [entry.name for entry in os.scandir(layout.pods_dir) if entry.is_dir()]


class UsernsManager:
    def __init__(self, layout: paths.Layout, *, max_pods: int, ids_per_pod: int = allocator.DEFAULT_IDS_PER_POD,
                 kubelet_mappings: tuple[int, int] | None = None,
                 start: Callable[[int], int] = random.randrange) -> None:
        """Upstream MakeUserNsManager: the kubelet's mappings (`read_kubelet_mappings`'s answer; None: the
        default) checked against `max_pods`, then every pod directory's ``userns`` file recorded. UsernsError
        (upstream's kubelet does not start) when a check or a file fails. `start` picks where the search for a
        free slot begins (upstream's bitmap scan starts at a random slot)."""
        first_id, length = kubelet_mappings or allocator.default_kubelet_mappings(ids_per_pod)
        self.layout, self._start = layout, start
        self._allocations = Allocations.for_kubelet(first_id, length, max_pods=max_pods, ids_per_pod=ids_per_pod)
        self._lock = threading.Lock()
        try:
            found = list_pods_from_disk(layout)
        except FileNotFoundError:
            found = []
        except OSError as exc:
            raise UsernsError(f"read pods from disk: {exc}") from None
        for uid in found:
            try:
                content = self._read(uid)
                if content:
                    self._record(uid, content)
            except (UsernsError, OSError) as exc:
                raise UsernsError(f"record pod mappings for existing pod {gotext.go_quote(uid)}: {exc}") from None

    @property
    def allocations(self) -> Allocations:
        """The slots held now."""
        return self._allocations

    # ------------------------------------------------------------------------------------------ the file

    def _read(self, uid: str) -> str:
        try:
            return Path(self.layout.userns_file(uid)).read_text()
        except FileNotFoundError:
            return ""

    def _write(self, uid: str, userns: cri.UserNamespace) -> None:
        """Upstream writeMappingsToFile: atomically (a temporary file, fsynced, renamed), then the pod directory
        fsynced too, so the record survives a crash once the sandbox has it."""
        directory = Path(self.layout.pod_dir(uid))
        directory.mkdir(mode=0o755, parents=True, exist_ok=True)
        # os.CreateTemp's 0600, as upstream's file keeps it
        checkpointmanager.write_atomically(self.layout.userns_file(uid), allocator.record_json(userns), mode=0o600)
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def _record(self, uid: str, content: str) -> cri.UserNamespace:
        userns = allocator.parse_record(content)
        self._allocations = self._allocations.record(uid, userns.uids[0].host_id, userns.uids[0].length)
        return userns

    # ------------------------------------------------------------------------------------------ the API

    def get_or_create(self, uid: str) -> cri.UserNamespace:
        """Upstream GetOrCreateUserNamespaceMappings once the runtime handler is known to support user namespaces:
        the range recorded for pod `uid`, else a new one, recorded before it is returned. Mode POD, one mapping
        from ID 0 for UIDs and GIDs. UsernsError with upstream's words."""
        with self._lock:
            try:
                content = self._read(uid)
            except OSError as exc:
                raise UsernsError(str(exc)) from None
            if content:
                try:
                    return self._record(uid, content)
                except UsernsError as exc:
                    raise UsernsError(f"user namespace: {exc}") from None
            try:
                allocations, first_id = self._allocations.allocate(uid, self._start(self._allocations.count))
            except UsernsError as exc:
                raise UsernsError(f"create user namespace: {exc}") from None
            self._allocations = allocations
            userns = allocator.new_record(first_id, allocations.ids_per_pod)
            try:
                self._write(uid, userns)
            except OSError as exc:
                self._release(uid)
                raise UsernsError(f"create user namespace: {exc}") from None
            logger.debug(f"new pod user namespace allocation for pod {uid}: host IDs from {first_id}")
            return userns

    def release(self, uid: str) -> None:
        """Upstream Release (SyncTerminatedPod, and kopflet's removal of a pod): the pod's range is free again and
        its ``userns`` file gone."""
        with self._lock:
            self._release(uid)

    def _release(self, uid: str) -> None:
        if uid not in self._allocations.used_by:
            return
        self._allocations = self._allocations.release(uid)
        logger.debug(f"released the user namespace allocation of pod {uid}")
        try:
            Path(self.layout.userns_file(uid)).unlink()
        except OSError:
            pass  # upstream ignores it: the range is free in memory, the directory goes with the pod

    @property
    def holds_ranges(self) -> bool:
        """Whether any pod has a range: with none, no cleanup can free anything (most nodes run no ``hostUsers:
        false`` pod), and the pod directories need not be read."""
        return bool(self._allocations.used_by)

    def cleanup_orphaned(self, known: Callable[[str], bool]) -> list[str]:
        """Upstream CleanupOrphanedPodUsernsAllocations (HandlePodCleanups): free the ranges of pod directories
        no one knows (`known`: the pod sources, the workers and the runtime, asked under the lock) and of
        allocations whose pod directory is gone. The UIDs released."""
        with self._lock:
            try:
                on_disk = list_pods_from_disk(self.layout)
            except FileNotFoundError:
                on_disk = []
            except OSError as exc:
                raise UsernsError(f"user namespace: read pods from disk: {exc}") from None
            released = [uid for uid in allocator.orphaned(self._allocations.used_by, on_disk, known)
                        if uid in self._allocations.used_by]
            for uid in released:
                self._release(uid)
            return released


__all__ = ["UsernsManager", "list_pods_from_disk", "read_kubelet_mappings"]
