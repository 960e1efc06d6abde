"""The kubelet's small state files (upstream pkg/kubelet/checkpointmanager with util/store's FileStore): written
whole or not at all, so a crash never leaves a torn file that would stop the agent at its next start. Blocking:
call these in a thread."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

FILE_MODE = 0o644


def write_atomically(path: str | os.PathLike[str], data: str | bytes, *, mode: int = FILE_MODE) -> None:
    """A temporary file of its own next to ``path`` (so two writers never share one), fsynced, given ``mode`` and
    renamed over ``path``; the directory is made if missing. OSError when it fails (the temporary file is
    removed)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read_text(path: str | os.PathLike[str]) -> str | None:
    """The file's text; None when there is none (a first start)."""
    try:
        return Path(path).read_text()
    except FileNotFoundError:
        return None


class CheckpointFile:
    """One state file that is rewritten as its state changes: read at start, then written only when the text
    differs from what is on disk (the state is saved on every admission; most change nothing). Blocking: call
    its methods in a thread."""

    def __init__(self, path: str | os.PathLike[str], *, mode: int = FILE_MODE) -> None:
        self.path, self.mode = path, mode
        self._written = ""

    def read(self) -> str | None:
        """The file's text (None without a file), remembered as what is on disk."""
        text = read_text(self.path)
        self._written = text or ""
        return text

    def write(self, text: str) -> None:
        """``text`` written atomically, unless the file already holds it. OSError when it cannot be."""
        if text == self._written:
            return
        write_atomically(self.path, text, mode=self.mode)
        self._written = text
