"""The containers and sandboxes the agent is stopping right now, so their exit events wait for the stop instead of
polling the runtime.

A stop the agent makes is seen by the runtime's event stream before the StopContainer (or StopPodSandbox) call
returns, and the CRI plugin records the exit only just before that: the event handler would read the status again
and again (`kopflet.pleg.evented.SETTLE_DELAYS`) for what the stop's own return says. The pod syncer marks each stop
here for as long as its call runs; the event handler waits for the mark to go, then reads once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class OwnStops:
    def __init__(self) -> None:
        self._stopping: dict[str, tuple[asyncio.Event, int]] = {}
        """Object id -> (set when its last stop call ends, how many stop calls of it are running)."""

    @contextlib.asynccontextmanager
    async def stopping(self, object_id: str) -> AsyncIterator[None]:
        """Mark `object_id` as being stopped by the agent while the block runs (its stop call), however it ends."""
        event, count = self._stopping.get(object_id, (asyncio.Event(), 0))
        self._stopping[object_id] = (event, count + 1)
        try:
            yield
        finally:
            event, count = self._stopping[object_id]
            if count > 1:
                self._stopping[object_id] = (event, count - 1)
            else:
                del self._stopping[object_id]
                event.set()

    async def wait(self, object_id: str) -> bool:
        """Wait until the agent's stop of `object_id` ends; False at once when none is running."""
        entry = self._stopping.get(object_id)
        if entry is None:
            return False
        await entry[0].wait()
        return True
