"""
The plugin manager's rules (upstream pkg/kubelet/pluginmanager at v1.37.1): its caches, what the reconciler does
with them, the operation executor's backoff, and the messages of its registration operation.

- The *desired* state of the world maps each registration socket found in ``plugins_registry`` to its generation
  (upstream gives each create event a fresh UUID; here the socket file's identity plays that part, so a socket
  removed and made again is a new plugin). The *actual* state maps the sockets of registered plugins to their
  `PluginInfo`.
- `reconcile` is upstream reconciler.go ``reconcile``: first unregister what is registered but no longer desired,
  or desired at another generation (a plugin restarted: unregistered before it registers again), then register
  what is desired and not registered at that generation.
- `ExponentialBackoff` is upstream goroutinemap's: an operation on a socket that failed may not run again for 500 ms,
  doubled after each failure up to 2 min 2 s; a success forgets it.
- The ``RegisterPlugin error -- ...`` texts are operation_generator.go's, word for word (what a plugin receives in
  NotifyRegistrationStatus and what the agent logs).

Pure: no I/O, no clock (callers pass `now`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

# pluginregistration/v1 constants.go: the plugin types.
CSI_PLUGIN = "CSIPlugin"
DEVICE_PLUGIN = "DevicePlugin"
DRA_PLUGIN = "DRAPlugin"

LOOP_SLEEP = 1.0  # plugin_manager.go loopSleepDuration: the reconciler's period
DIAL_TIMEOUT = 10.0  # operation_generator.go dialTimeoutDuration
GET_INFO_TIMEOUT = 1.0  # operation_generator.go: GetInfo's context.WithTimeout(ctx, time.Second)
NOTIFY_TIMEOUT = 5.0  # operation_generator.go notifyTimeoutDuration
INITIAL_DURATION_BEFORE_RETRY = 0.5  # goroutinemap/exponentialbackoff initialDurationBeforeRetry
MAX_DURATION_BEFORE_RETRY = 122.0  # maxDurationBeforeRetry: 2*time.Minute + 2*time.Second


@dataclasses.dataclass(frozen=True)
class PluginInfo:
    """Upstream cache.PluginInfo: the registration socket and its generation (upstream's UUID); once registered,
    the type whose handler took it (upstream keeps the handler itself), the plugin's name and endpoint."""

    socket_path: str
    uuid: str
    type: str = ""
    name: str = ""
    endpoint: str = ""


@dataclasses.dataclass(frozen=True)
class Plan:
    """One reconcile round: the plugins to unregister, then the sockets (at their generation) to register."""

    unregister: tuple[PluginInfo, ...] = ()
    register: tuple[PluginInfo, ...] = ()


def reconcile(desired: Mapping[str, str], actual: Mapping[str, PluginInfo]) -> Plan:
    """Upstream reconciler.reconcile over `desired` (socket path → generation) and `actual` (socket path → the
    registered plugin). Sorted by socket path, so a round is deterministic (upstream ranges over maps)."""
    unregister = tuple(info for path, info in sorted(actual.items())
                       if path not in desired or desired[path] != info.uuid)
    register = tuple(PluginInfo(path, uuid) for path, uuid in sorted(desired.items())
                     if path not in actual or actual[path].uuid != uuid)
    return Plan(unregister, register)


@dataclasses.dataclass(frozen=True)
class ExponentialBackoff:
    """Upstream exponentialbackoff.ExponentialBackoff of one operation name (a socket path)."""

    last_error: str = ""
    last_error_time: float = 0.0
    duration_before_retry: float = 0.0

    def safe_to_retry(self, now: float) -> bool:
        """Upstream SafeToRetry: not while `now` is within the wait after the last error (none before one)."""
        return self.duration_before_retry == 0 or now - self.last_error_time > self.duration_before_retry

    def updated(self, error: str, now: float) -> ExponentialBackoff:
        """Upstream Update after a failure: 500 ms first, then doubled, at most 2 min 2 s."""
        duration = (INITIAL_DURATION_BEFORE_RETRY if self.duration_before_retry == 0
                    else min(2 * self.duration_before_retry, MAX_DURATION_BEFORE_RETRY))
        return ExponentialBackoff(error, now, duration)

    def no_retries_permitted_message(self, operation: str) -> str:
        """Upstream GenerateNoRetriesPermittedMsg (times as seconds on the caller's clock)."""
        return (f'Operation for "{operation}" failed. No retries permitted for {self.duration_before_retry:g}s '
                f"(durationBeforeRetry {self.duration_before_retry:g}s). Error: {self.last_error}")


def rpc_error_text(code: str, details: str) -> str:
    """A gRPC status as grpc-go prints it (``rpc error: code = Unavailable desc = ...``), as upstream's messages
    embed it; `code` is the status code's name (``UNAVAILABLE``)."""
    name = "Canceled" if code == "CANCELLED" else "".join(part.capitalize() for part in code.split("_"))
    return f"rpc error: code = {name} desc = {details}"


# ------------------------------------------------------------------------ operation_generator.go's texts

def dial_failed(socket_path: str, error: str = "context deadline exceeded") -> str:
    """The registration socket could not be dialled within DIAL_TIMEOUT (grpc-go's WithBlock: the context's
    deadline)."""
    return (f"RegisterPlugin error -- dial failed at socket {socket_path}, err: failed to dial socket {socket_path}, "
            f"err: {error}")


def get_info_failed(socket_path: str, error: str) -> str:
    return f"RegisterPlugin error -- failed to get plugin info using RPC GetInfo at socket {socket_path}, err: {error}"


def no_handler(plugin_type: str, socket_path: str) -> str:
    return f"RegisterPlugin error -- no handler registered for plugin type: {plugin_type} at socket {socket_path}"


def validation_failed(error: str) -> str:
    """What the plugin is told when its handler refused it."""
    return f"RegisterPlugin error -- plugin validation failed with err: {error}"


def registration_failed(error: str) -> str:
    """What the plugin is told when its handler could not register it."""
    return f"RegisterPlugin error -- plugin registration failed with err: {error}"


def notify_failed(error_text: str, rpc_error: str | None) -> str:
    """Upstream notifyPlugin's error for a failure status: the text itself once it is sent, the text and the
    RPC's error when sending it failed."""
    return error_text if rpc_error is None else f"{error_text}: {rpc_error}"


def failed_to_send_error(socket_path: str, notify_error: str) -> str:
    """The operation's error after a refusal (upstream returns it whether or not the refusal reached the plugin:
    notifyPlugin returns an error for every failure status)."""
    return f"RegisterPlugin error -- failed to send error at socket {socket_path}, err: {notify_error}"


def failed_to_send_status(socket_path: str, rpc_error: str) -> str:
    """The success status could not be sent: the plugin is deregistered again (upstream's ``%s: %w`` of an empty
    text makes the ``err: : rpc error`` double colon)."""
    return f"RegisterPlugin error -- failed to send registration status at socket {socket_path}, err: : {rpc_error}"


def no_handler_to_unregister(socket_path: str) -> str:
    return f"UnregisterPlugin error -- failed to get plugin handler for {socket_path}"


__all__ = [
    "CSI_PLUGIN", "DEVICE_PLUGIN", "DIAL_TIMEOUT", "DRA_PLUGIN", "GET_INFO_TIMEOUT", "INITIAL_DURATION_BEFORE_RETRY",
    "LOOP_SLEEP", "MAX_DURATION_BEFORE_RETRY", "NOTIFY_TIMEOUT", "ExponentialBackoff",
    "Plan", "PluginInfo", "dial_failed", "failed_to_send_error", "failed_to_send_status", "get_info_failed",
    "no_handler", "no_handler_to_unregister", "notify_failed", "reconcile", "registration_failed", "rpc_error_text",
    "validation_failed",
]
