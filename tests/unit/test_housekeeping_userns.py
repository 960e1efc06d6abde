"""Housekeeping frees orphaned user namespace ranges (upstream HandlePodCleanups'
CleanupOrphanedPodUsernsAllocations)."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from cri_client import CriError
from kopflet.paths import Layout
from kopflet.pods.housekeeping import Housekeeping
from kopflet.userns.userns_manager import UsernsManager


class Relist:
    """The runtime cache: `pods` are the UIDs the runtime still runs something of."""

    def __init__(self, pods: Iterable[str] = ()) -> None:
        self.pods: dict[str, Any] = {uid: SimpleNamespace(namespace="ns", name=uid) for uid in pods}
        self.synced = asyncio.Event()
        self.synced.set()


class Api:
    def __init__(self, uids: list[str]) -> None:
        self.uids = uids

    async def list_pods(self, field_selector: str) -> list[dict[str, Any]]:
        return [{"metadata": {"uid": uid}} for uid in self.uids]


class Teardown:
    def __init__(self) -> None:
        self.pods: list[str] = []

    async def pod(self, uid: str, namespace: str = "", name: str = "") -> None:
        self.pods.append(uid)  # leaves the directory: the userns cleanup still finds it unknown


def housekeeping(tmp_path: Path, workers: set[str], listed: list[str]) -> tuple[Housekeeping, UsernsManager,
                                                                                Teardown]:
    layout = Layout(str(tmp_path), pod_log_root=str(tmp_path / "logs"))
    userns = UsernsManager(layout, max_pods=110)
    teardown = Teardown()
    keeper = Housekeeping(Api(listed), Relist(), workers, teardown, layout, "spec.nodeName=n",  # type: ignore[arg-type]
                          userns=userns)
    return keeper, userns, teardown


async def test_a_range_whose_pod_directory_is_gone_is_freed(tmp_path: Path) -> None:
    keeper, userns, teardown = housekeeping(tmp_path, workers={"a"}, listed=[])
    for uid in ("a", "gone"):
        userns.get_or_create(uid)
    shutil.rmtree(tmp_path / "pods" / "gone")
    await keeper.cleanup_orphans()  # every directory has a worker: the apiserver is not asked
    assert set(userns.allocations.used_by) == {"a"} and not teardown.pods


async def test_a_range_of_a_pod_no_one_knows_is_freed(tmp_path: Path) -> None:
    keeper, userns, teardown = housekeeping(tmp_path, workers={"a"}, listed=["listed"])
    for uid in ("a", "listed", "unknown"):
        userns.get_or_create(uid)
    await keeper.cleanup_orphans()
    assert teardown.pods == ["unknown"]
    assert set(userns.allocations.used_by) == {"a", "listed"}
    assert not (tmp_path / "pods" / "unknown" / "userns").exists()


class FailingTeardown(Teardown):
    """A teardown whose runtime answers with an error for the pods in `failing` (a sandbox whose status cannot be
    read, say)."""

    def __init__(self, failing: set[str]) -> None:
        super().__init__()
        self.failing = failing

    async def pod(self, uid: str, namespace: str = "", name: str = "") -> None:
        if uid in self.failing:
            raise CriError("UNKNOWN", "failed to read the sandbox's status", "PodSandboxStatus")
        await super().pod(uid, namespace, name)


async def test_one_orphan_that_cannot_be_removed_does_not_stop_the_round(tmp_path: Path) -> None:
    layout = Layout(str(tmp_path), pod_log_root=str(tmp_path / "logs"))
    userns = UsernsManager(layout, max_pods=110)
    for uid in ("dir-only", "unknown"):
        userns.get_or_create(uid)
    teardown = FailingTeardown({"broken", "dir-only"})
    keeper = Housekeeping(Api([]), Relist(["broken", "fine"]), set(), teardown, layout,  # type: ignore[arg-type]
                          "spec.nodeName=n", userns=userns)
    assert await keeper.cleanup_orphans() == 2
    # the other runtime orphan and the other directory were still removed, and the user namespaces cleaned up
    assert teardown.pods == ["fine", "unknown"]
    assert not userns.allocations.used_by  # the round went on to free the ranges no one knows


async def test_with_no_range_held_the_pod_directories_are_not_read(tmp_path: Path, monkeypatch: Any) -> None:
    """Most nodes run no ``hostUsers: false`` pod: nothing can be freed, so nothing is read (no thread either)."""
    from kopflet.userns import userns_manager

    keeper, userns, _ = housekeeping(tmp_path, workers=set(), listed=[])
    (tmp_path / "pods" / "orphan").mkdir(parents=True)
    read: list[Layout] = []
    real = userns_manager.list_pods_from_disk
    monkeypatch.setattr(userns_manager, "list_pods_from_disk", lambda layout: read.append(layout) or real(layout))
    assert not userns.holds_ranges
    await keeper.cleanup_user_namespaces(set())
    assert read == []
    userns.get_or_create("orphan")  # one range: the directories are read, and the orphan's range freed
    assert userns.holds_ranges
    await keeper.cleanup_user_namespaces(set())
    assert len(read) == 1 and not userns.holds_ranges
