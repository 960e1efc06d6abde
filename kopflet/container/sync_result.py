"""What one pod sync could not do: the waiting reasons and errors that its status shows and that decide when the
worker tries again (upstream kubecontainer.PodSyncResult, and kuberuntime's reasonCache entries)."""

from __future__ import annotations

import dataclasses

CRASH_LOOP_BACK_OFF = "CrashLoopBackOff"
"""kubecontainer.ErrCrashLoopBackOff: a wait, not a failure (the back-off sets the next attempt)."""

# The steps of a pod start as the runtime side times them (`StepTime.kind`), for the pod's start timeline
# (`kopflet.pods.timeline`); the worker adds admission and until ready.
ADMISSION = "admission"
VOLUMES = "volumes"
SANDBOX = "sandbox"
IMAGE_PULL = "image pull"
CREATE = "create"
START = "start"
UNTIL_READY = "until ready"


@dataclasses.dataclass(frozen=True)
class Waiting:
    """Why a container is not running after the last sync (upstream reasonCache entry)."""

    reason: str
    message: str = ""


@dataclasses.dataclass(frozen=True)
class StepTime:
    """One step carried out for a pod, timed where it happened: its kind, what it was for (the image of a pull, the
    container of a create or start; "" for the pod's own steps), when it began and ended (`time.monotonic`), and
    why it failed ("": done), in the waiting reason's or the event's word (ErrImagePull, FailedMount ...)."""

    kind: str
    detail: str
    start: float
    end: float
    error: str = ""


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
    steps: list[StepTime] = dataclasses.field(default_factory=list)
    """The steps this sync carried out, timed (volumes, the sandbox, each container's create and start), for the
    pod's start timeline."""

    @property
    def failed(self) -> bool:
        return bool(self.sandbox_error or self.volume_error) or any(
            w.reason != CRASH_LOOP_BACK_OFF for w in self.waiting.values())
