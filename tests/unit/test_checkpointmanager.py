"""kopflet.checkpointmanager: state files written whole or not at all."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from kopflet import checkpointmanager


def test_a_file_is_replaced_whole_with_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "state"
    assert checkpointmanager.read_text(path) is None
    checkpointmanager.write_atomically(path, "one")
    checkpointmanager.write_atomically(path, b"two", mode=0o600)
    assert checkpointmanager.read_text(path) == "two"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert os.listdir(path.parent) == ["state"]  # no temporary file left


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "state"
    checkpointmanager.write_atomically(path, "old")

    def fail(*_: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        checkpointmanager.write_atomically(path, "new")
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["state"]


def test_a_checkpoint_file_is_written_only_when_its_text_changes(tmp_path: Path) -> None:
    path = tmp_path / "state"
    path.write_text("on disk")
    state = checkpointmanager.CheckpointFile(path)
    assert state.read() == "on disk"
    before = path.stat().st_ino
    state.write("on disk")  # unchanged: not rewritten
    assert path.stat().st_ino == before
    state.write("new")
    assert path.read_text() == "new" and path.stat().st_ino != before
    assert checkpointmanager.CheckpointFile(tmp_path / "none").read() is None
