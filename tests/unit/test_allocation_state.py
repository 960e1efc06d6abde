"""kopflet.allocation.state on a real directory: many writers at once (workers write from threads)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kopflet import paths
from kopflet.allocation import policy
from kopflet.allocation.policy import PodAllocation
from kopflet.allocation.state import AllocationManager
from kopflet.api.spec import Resources


def test_concurrent_writers_from_threads_lose_nothing(tmp_path: Path) -> None:
    layout = paths.Layout(root_dir=str(tmp_path))
    manager = AllocationManager(layout)

    async def main() -> None:
        await asyncio.gather(*(asyncio.to_thread(manager.set_actuated_container, f"uid-{i}", "main",
                                                 Resources(requests={"cpu": f"{i + 1}m"}))
                               for i in range(64)))
        await asyncio.gather(*(asyncio.to_thread(manager.remove, f"uid-{i}") for i in range(0, 64, 2)))

    asyncio.run(main())
    on_disk = policy.read_checkpoint(Path(layout.actuated_state).read_text())
    assert sorted(on_disk) == sorted(f"uid-{i}" for i in range(1, 64, 2))
    assert all(isinstance(v, PodAllocation) for v in on_disk.values())
    assert not list(tmp_path.glob("*.tmp"))


def test_each_write_hashes_again_only_from_the_first_changed_pod(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The file's checksum chain is kept from one write to the next: a pod added after the others hashes its own
    piece and the end again, not the pods before it; the file read back is whole."""
    layout = paths.Layout(root_dir=str(tmp_path))
    manager = AllocationManager(layout)
    for i in range(20):
        manager.set_actuated_container(f"uid-{i:02d}", "main", Resources(requests={"cpu": f"{i + 1}m"}))
    hashed: list[int] = []
    real = policy._fnv1a_32

    def counting(data: bytes, value: int = policy._FNV_OFFSET) -> int:
        hashed.append(len(data))
        return real(data, value)

    monkeypatch.setattr(policy, "_fnv1a_32", counting)
    manager.set_actuated_container("uid-99", "main", Resources(requests={"cpu": "1"}))
    text = Path(layout.actuated_state).read_text()
    assert len(hashed) == 2 and sum(hashed) < len(text) // 10  # the new pod's piece and the closing "}}"
    assert sorted(policy.read_checkpoint(text)) == [*(f"uid-{i:02d}" for i in range(20)), "uid-99"]
