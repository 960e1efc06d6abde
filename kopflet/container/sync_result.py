"""What one pod sync could not do: the waiting reasons and errors that its status shows and that decide when the
worker tries again (upstream kubecontainer.PodSyncResult, and kuberuntime's reasonCache entries)."""

from __future__ import annotations

import dataclasses

CRASH_LOOP_BACK_OFF = "CrashLoopBackOff"
"""kubecontainer.ErrCrashLoopBackOff: a wait, not a failure (the back-off sets the next attempt)."""


@dataclasses.dataclass(frozen=True)
class Waiting:
    """Why a container is not running after the last sync (upstream reasonCache entry)."""

    reason: str
    message: str = ""


@dataclasses.dataclass
class SyncResult:
    """What one sync could not do, for the pod's status and the worker's next wake-up."""

    waiting: dict[str, Waiting] = dataclasses.field(default_factory=dict)
    sandbox_error: str = ""
    volume_error: str = ""
    retry_after: float | None = None
    resize_error: str = ""
    """Why the in-place resize could not be actuated (PodResizeInProgress reason Error)."""
    resized: list[str] = dataclasses.field(default_factory=list)
    """Containers whose resources were updated: their runtime status must be read again."""

    @property
    def failed(self) -> bool:
        return bool(self.sandbox_error or self.volume_error) or any(
            w.reason != CRASH_LOOP_BACK_OFF for w in self.waiting.values())
