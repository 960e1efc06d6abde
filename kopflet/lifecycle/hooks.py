"""Container lifecycle hooks, postStart and preStop (upstream pkg/kubelet/lifecycle/handlers.go).

A handler is ``exec`` (run in the container through CRI ExecSync), ``httpGet`` (to the pod IP, a port
by number or by the container's port name) or ``sleep``. A failure returns upstream's message, which
the caller puts into the FailedPostStartHook / FailedPreStopHook event.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import aiohttp

from cri_client import CriClient, CriError
from kopflet import gotext
from kopflet.api import spec


class HookRunner:
    def __init__(self, cri_client: CriClient) -> None:
        self.cri = cri_client

    async def run(self, handler: Mapping[str, Any], pod: spec.Pod, container: spec.ContainerSpec,
                  container_id: str, pod_ip: str, seconds: float) -> str | None:
        """Run one handler; None on success, else the upstream failure message. ``seconds`` bounds an exec
        (enforced by the runtime) or an HTTP request; the caller bounds the whole call."""
        where = f"for Container {gotext.go_quote(container.name)} in Pod {gotext.go_quote(pod.full_name)}"
        if "exec" in handler:
            command = [str(c) for c in (handler["exec"] or {}).get("command") or []]
            failed = f"Exec lifecycle hook ({gotext.go_string_slice(command)}) {where} failed"
            try:
                result = await self.cri.containers.exec_sync(container_id, command, timeout=seconds)
            except CriError as exc:
                return f"{failed} - error: {exc.details}, message: \"\""
            if result.exit_code == 0:
                return None
            output = (result.stdout + result.stderr).decode(errors="replace")
            stderr = result.stderr.decode(errors="replace")
            error = f"command '{' '.join(command)}' exited with {result.exit_code}: {stderr}"
            return f"{failed} - error: {error}, message: {gotext.go_quote(output)}"
        if "httpGet" in handler:
            http = handler["httpGet"] or {}
            path = str(http.get("path") or "/")
            try:
                port = spec.resolve_port(http.get("port", 0), container)
                host = str(http.get("host") or pod_ip)
                scheme = str(http.get("scheme") or "HTTP").lower()
                url = f"{scheme}://{gotext.join_host_port(host, port)}/{path.lstrip('/')}"
                headers = {h["name"]: h["value"] for h in http.get("httpHeaders") or [] if "name" in h}
                async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=max(seconds, 1))) as session, \
                        session.get(url, headers=headers, ssl=False) as resp:
                    await resp.read()
                    if resp.status >= 400:
                        raise ValueError(f"HTTP lifecycle hook failed with status code {resp.status}")
            except (ValueError, aiohttp.ClientError, OSError, TimeoutError) as exc:
                return f"HTTP lifecycle hook ({path}) {where} failed - error: {exc or type(exc).__name__}"
            return None
        if "sleep" in handler:
            await asyncio.sleep(max(float((handler["sleep"] or {}).get("seconds", 0)), 0))
            return None
        return f"Cannot run handler: invalid lifecycle handler {dict(handler)!r} {where}"
