"""
The client survives a containerd restart: fast UNAVAILABLE while it is down, working again after.

Uses its OWN throwaway containerd (root, state and socket in a temp dir), never the stack's: killing
the shared runtime would break everything else running against it. Gated on CONTAINER_RUNTIME_ENDPOINT
like the other tests here (it marks a machine where containerd can run), though it does not use it.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from cri_client import CriClient, CriError

# Long enough for gRPC's default reconnect backoff to grow well past the client's 2 s cap.
OUTAGE_SECONDS = 20

CONFIG = """\
version = 2
root = "{base}/root"
state = "{base}/state"

[grpc]
  address = "{socket}"

[ttrpc]
  address = "{base}/state/containerd.sock.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "{base}/opt"

[plugins."io.containerd.grpc.v1.cri"]
  # Required on this VM: without it every sandbox fails with "can't get final child's PID from pipe: EOF".
  restrict_oom_score_adj = true
  # Never collide with the stack's containerd (or the 10010 default) on the streaming port.
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = "/usr/lib/cni"
  conf_dir = "{base}/cni"
"""


class Containerd:
    """One private containerd process that can be killed and started again on the same state."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.socket = base / "containerd.sock"
        self.config = base / "config.toml"
        self.log = base / "containerd.log"
        self.config.write_text(CONFIG.format(base=base, socket=self.socket))
        self.process: asyncio.subprocess.Process | None = None

    @property
    def endpoint(self) -> str:
        return f"unix://{self.socket}"

    async def start(self) -> None:
        binary = shutil.which("containerd")
        if binary is None:
            pytest.fail("containerd is not installed, but CONTAINER_RUNTIME_ENDPOINT says this is a runtime host")
        with self.log.open("ab") as log:
            self.process = await asyncio.create_subprocess_exec(
                binary, "--config", str(self.config), stdout=log, stderr=log, start_new_session=True
            )

    async def kill(self) -> None:
        """SIGKILL, like a crash: no graceful shutdown, the socket file stays behind."""
        if self.process is not None and self.process.returncode is None:
            self.process.kill()
            await self.process.wait()
        self.process = None

    async def wait_for_socket(self, within: float) -> None:
        """Wait until containerd accepts connections, measured without gRPC (whose channels may share
        connection state, and so backoff, with the client under test)."""
        started = time.monotonic()
        while True:
            try:
                _, writer = await asyncio.open_unix_connection(str(self.socket))
            except OSError:
                if time.monotonic() - started > within:
                    raise AssertionError(f"containerd did not listen within {within}s:\n{self.log_tail()}") from None
                await asyncio.sleep(0.05)
            else:
                writer.close()
                await writer.wait_closed()
                return

    def log_tail(self, lines: int = 30) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


@pytest.fixture
async def containerd(endpoint: str) -> AsyncIterator[Containerd]:
    # A short path under /tmp: unix socket paths are limited to 108 bytes.
    base = Path(tempfile.mkdtemp(prefix="kopflet-cri-"))
    runtime = Containerd(base)
    try:
        yield runtime
    finally:
        await runtime.kill()
        shutil.rmtree(base, ignore_errors=True)


async def wait_until_served(cri: CriClient, runtime: Containerd, within: float) -> float:
    """Poll Version on the client under test until it succeeds; return how long that took."""
    started = time.monotonic()
    while True:
        try:
            await cri.version()
            return time.monotonic() - started
        except CriError as e:
            assert e.unavailable, f"unexpected error while containerd starts: {e}"
            if time.monotonic() - started > within:
                raise AssertionError(f"containerd did not serve within {within}s:\n{runtime.log_tail()}") from e
            await asyncio.sleep(0.2)


async def test_same_client_survives_a_containerd_restart(containerd: Containerd) -> None:
    # A long timeout: if outage calls waited for the deadline instead of failing fast, this test would notice.
    async with CriClient(containerd.endpoint, timeout=60) as cri:
        await containerd.start()
        await wait_until_served(cri, containerd, within=60)
        version = await cri.check_runtime()
        assert version.runtime_name == "containerd"

        await containerd.kill()
        # Keep calling during the outage, as kubelet's relist loop would: every call must fail fast,
        # and the failed reconnects grow the channel's backoff (to 2 minutes with gRPC's defaults).
        outage = time.monotonic()
        while time.monotonic() - outage < OUTAGE_SECONDS:
            started = time.monotonic()
            with pytest.raises(CriError) as info:
                await cri.sandboxes.list()
            elapsed = time.monotonic() - started
            assert info.value.unavailable, info.value
            assert elapsed < 5, f"a call during the outage took {elapsed:.1f}s: it must fail fast"
            await asyncio.sleep(0.2)
        with pytest.raises(CriError) as info:
            await cri.check_runtime()
        assert info.value.unavailable and containerd.endpoint in str(info.value)

        await containerd.start()
        await containerd.wait_for_socket(within=60)
        # containerd accepts connections again; the old client must follow within about one capped
        # reconnect backoff (2 s, plus jitter). With gRPC's default backoff it takes ~6 s after this outage.
        took = await wait_until_served(cri, containerd, within=60)
        assert took < 4, f"the client needed {took:.1f}s to reconnect after containerd was back"
        assert await cri.check_runtime() == version
        assert await cri.sandboxes.list() == []
        status = await cri.status()
        assert status.runtime_ready, status
