"""kopflet.allocation.state on a real directory: many writers at once (workers write from threads)."""

from __future__ import annotations

import asyncio
from pathlib import Path

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
