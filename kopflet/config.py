"""The agent's settings: a frozen tree built from the environment by a pure function.

Defaults and names follow the upstream kubelet's flags where one exists
(``--container-runtime-endpoint``, ``--runtime-request-timeout``, ``--hostname-override``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

# The upstream kubelet's default CRI endpoint for containerd.
DEFAULT_RUNTIME_ENDPOINT = "unix:///run/containerd/containerd.sock"
# --runtime-request-timeout default: 2 minutes.
DEFAULT_RUNTIME_REQUEST_TIMEOUT = 120.0

_NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class ConfigError(ValueError):
    """A setting is invalid; the message names the variable and what it expects."""


@dataclasses.dataclass(frozen=True)
class AgentConfig:
    node_name: str
    """The Node this agent is; only Pods with ``spec.nodeName`` equal to it are watched."""
    runtime_endpoint: str = DEFAULT_RUNTIME_ENDPOINT
    """CRI socket, ``unix://`` only (as the upstream kubelet on Linux)."""
    runtime_request_timeout: float = DEFAULT_RUNTIME_REQUEST_TIMEOUT
    """Deadline for every CRI call except image pulls, which get their own."""
    node_ip: str = ""
    """The node's InternalIP (``--node-ip``): hostIP of its pods. Empty: detected at start."""
    root_dir: str = "/var/lib/kopflet"
    """Per-pod files (termination-log files, later volumes), as ``/var/lib/kubelet`` upstream."""
    pod_log_root: str = "/var/log/pods"
    """Where CRI container logs go; fixed upstream, log collectors expect it."""
    cluster_dns: tuple[str, ...] = ()
    """``--cluster-dns``: nameservers for ClusterFirst pods; empty means pods fall back to the host's."""
    cluster_domain: str = "cluster.local"
    """``--cluster-domain``."""
    resync_period: float = 60.0
    """``syncFrequency``: every pod is synced at least this often."""

    @property
    def pod_field_selector(self) -> str:
        return f"spec.nodeName={self.node_name}"


def from_env(environ: Mapping[str, str], hostname: str) -> AgentConfig:
    """Read ``KOPFLET_*`` and ``CONTAINER_RUNTIME_ENDPOINT``; the node name defaults to the hostname."""
    node_name = (environ.get("KOPFLET_NODE_NAME") or hostname).strip().lower()
    if len(node_name) > 253 or not _NODE_NAME.match(node_name):
        raise ConfigError(f"KOPFLET_NODE_NAME {node_name!r} is not a valid node name (a DNS subdomain)")
    endpoint = environ.get("CONTAINER_RUNTIME_ENDPOINT") or DEFAULT_RUNTIME_ENDPOINT
    if not endpoint.startswith("unix://"):
        raise ConfigError(f"CONTAINER_RUNTIME_ENDPOINT {endpoint!r} must be a unix:// socket address")
    raw_timeout = environ.get("KOPFLET_RUNTIME_REQUEST_TIMEOUT", str(DEFAULT_RUNTIME_REQUEST_TIMEOUT))
    try:
        timeout = float(raw_timeout)
    except ValueError:
        raise ConfigError(f"KOPFLET_RUNTIME_REQUEST_TIMEOUT {raw_timeout!r} is not a number of seconds") from None
    if timeout <= 0:
        raise ConfigError(f"KOPFLET_RUNTIME_REQUEST_TIMEOUT must be positive, not {raw_timeout!r}")
    return AgentConfig(
        node_name=node_name, runtime_endpoint=endpoint, runtime_request_timeout=timeout,
        node_ip=environ.get("KOPFLET_NODE_IP", ""),
        root_dir=environ.get("KOPFLET_ROOT_DIR") or "/var/lib/kopflet",
        cluster_dns=tuple(s.strip() for s in environ.get("KOPFLET_CLUSTER_DNS", "").split(",") if s.strip()),
        cluster_domain=environ.get("KOPFLET_CLUSTER_DOMAIN") or "cluster.local",
    )
