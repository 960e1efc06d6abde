"""The plugin watcher (upstream pkg/kubelet/pluginmanager/pluginwatcher): which registration sockets are in
``<root-dir>/plugins_registry`` now.

Upstream follows the directory tree with fsnotify (inotify) and feeds create and delete events to the desired
state of the world; here the tree is scanned at the reconciler's period (1 s), which sees the same sockets at the
same point (upstream acts on them at its next 1 s reconcile). A socket's generation is its file's identity (device,
inode, change time): a socket removed and made again between two scans is a new generation, as upstream gives every
create event a new UUID.

As upstream: files whose name starts with ``.`` are ignored, subdirectories are followed (symbolic links to
directories are not: filepath.Walk's Lstat), a socket is a path that stats as a unix socket (a symbolic link to one
counts: util.IsUnixDomainSocket's os.Stat), anything else is ignored. Directories whose name starts with ``.`` are
not followed (upstream ignores those created after it started, and walks those that were there before: the scan
cannot tell them apart).
"""

from __future__ import annotations

import logging
import os
import stat

logger = logging.getLogger(__name__)


def scan(root: str) -> dict[str, str]:
    """The registration sockets under `root` (socket path → generation); blocking, call in a thread. A `root` that
    is gone has none; OSError when it cannot be read otherwise (the caller keeps what it knew)."""
    found: dict[str, str] = {}
    pending = [root]
    while pending:
        directory = pending.pop()
        try:
            with os.scandir(directory) as entries:
                listed = list(entries)
        except FileNotFoundError:
            if directory == root:
                return {}
            continue
        except OSError as exc:
            if directory == root:
                raise
            logger.error(f"Error accessing path {directory}: {exc}")
            continue
        for entry in listed:
            if entry.name.startswith("."):
                logger.debug(f"Ignoring file (starts with '.') {entry.path}")
                continue
            try:
                if entry.is_dir(follow_symlinks=False):
                    pending.append(entry.path)
                    continue
                st = os.stat(entry.path)
            except OSError:
                continue  # gone meanwhile, or a dangling link
            if stat.S_ISSOCK(st.st_mode):
                # the socket's identity: a chmod or chown (ctime) is no new plugin, as upstream's watcher
                # ignores Chmod events; a socket made again has a new mtime even if its inode is reused
                found[entry.path] = f"{st.st_dev}:{st.st_ino}:{st.st_mtime_ns}"
    return found


__all__ = ["scan"]
