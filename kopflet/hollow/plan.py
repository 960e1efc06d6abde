"""What ``kopflet hollow --nodes N`` runs: each hollow node's name, directory, runtime socket, ports and kubelet flags.

Why: N agents share one process and one machine, so everything a kubelet keeps per node (its identity, root dir, pod
logs, certificates, kubeconfig, runtime socket, kubelet API port) must be its own, and nothing of the machine's own
agent (the stack's ``$KOPFLET_CONFIG``, ``$NODE_NAME``, the legacy ``KOPFLET_*`` variables) may leak into a hollow
node. Upstream's kubemark gives each hollow kubelet its own pod (network namespace, ``--kubeconfig``, root dir); here
every node gets ``<state-dir>/<name>/`` and a port of its own, and its identity through TLS bootstrap
(``--bootstrap-kubeconfig``, one shared bootstrap token; each node's own ``system:node:<name>`` certificate).

Pure: strings and dataclasses; `kopflet.hollow.runtime` serves the sockets, ``handlers.hollow`` runs the nodes.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import ipaddress
import posixpath
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Final

from kopflet import paths
from kopflet.config import settings as configuration

DEFAULT_NAME_PREFIX: Final = "hollow-node-"
DEFAULT_STATE_DIR: Final = "/var/lib/kopflet-hollow"
DEFAULT_PORT_BASE: Final = 11250
"""Node i serves the kubelet API on DEFAULT_PORT_BASE + i: the nodes share one IP (kubemark's each have a pod's)."""
RUNTIME_SOCKET: Final = "hollow.sock"
KUBECONFIG: Final = "kubelet.conf"
DEFAULT_POD_CIDR_BASE: Final = "10.224.0.0/12"
"""4096 nodes' /24s, apart from containerd's default bridge (10.88.0.0/16) and the usual service ranges."""
NODE_POD_PREFIX: Final = 24
DEVICE_MANAGER_SOCKET: Final = "kubelet.sock"  # deviceplugin/v1beta1 KubeletSocket, in <root>/device-plugins
MAX_SOCKET_PATH: Final = 107
"""sockaddr_un's sun_path is 108 bytes with the terminating NUL (Linux)."""

OWN_FLAGS: Final = frozenset({
    "hostname-override", "root-dir", "cert-dir", "kubeconfig", "container-runtime-endpoint", "image-service-endpoint",
    "port", "healthz-port", "lock-file", "exit-on-lock-contention", "cgroups-per-qos", "enforce-node-allocatable"})
"""Flags the plan sets per node; given by the user they would make the nodes share something (or break them)."""
_FLAG: Final = re.compile(r"--?([A-Za-z0-9-]+)(=.*)?")
_NAME: Final = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")
HOST_VARIABLES: Final = frozenset({configuration.ARGS_ENV, configuration.CONFIG_ENV, configuration.NODE_NAME_ENV,
                                   configuration.LEGACY_NODE_NAME_ENV, *configuration.LEGACY_ENV})
"""The machine's own agent's settings in the environment: a hollow node reads its flags only."""


class PlanError(ValueError):
    """The hollow options cannot make N separate nodes (the message says why, for a usage error)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class HollowOptions:
    """``kopflet hollow``'s own options; `kubelet_args` go to every node (after its own, so they cannot override
    the per-node flags, which are refused there)."""

    nodes: int
    name_prefix: str = DEFAULT_NAME_PREFIX
    state_dir: str = DEFAULT_STATE_DIR
    port_base: int = DEFAULT_PORT_BASE
    latency: str = "default"
    """"default" (the measured containerd floor, `Latencies`) or "zero" (upstream's fake runtime)."""
    latency_overrides: tuple[tuple[str, float], ...] = ()
    pod_cidr_base: str = DEFAULT_POD_CIDR_BASE
    """Cut into a /24 per node (`node_pod_cidr`), so pod IPs are unique in the cluster (never routed: nothing runs);
    upstream's fake runtime gives every sandbox one fixed IP."""
    kubelet_args: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class NodePlan:
    """One hollow node: where its files live and the flags its agent runs with."""

    index: int
    name: str
    directory: str
    port: int
    args: tuple[str, ...]
    pod_cidr: str

    @property
    def socket(self) -> str:
        return posixpath.join(self.directory, RUNTIME_SOCKET)

    def sockets(self) -> tuple[str, ...]:
        """The unix sockets the node serves: the runtime's, the device plugins' registration and pod-resources."""
        layout = paths.Layout(root_dir=posixpath.join(self.directory, "root"))
        return (self.socket, posixpath.join(layout.device_plugins_dir, DEVICE_MANAGER_SOCKET),
                layout.pod_resources_socket)

    @property
    def endpoint(self) -> str:
        return f"unix://{self.socket}"

    @property
    def kubeconfig(self) -> str:
        return posixpath.join(self.directory, KUBECONFIG)

    @property
    def pod_log_root(self) -> str:
        return posixpath.join(self.directory, "pods-logs")

    @property
    def container_logs_dir(self) -> str:
        return posixpath.join(self.directory, "containers-logs")

    def environ(self, environ: Mapping[str, str]) -> dict[str, str]:
        """The node's environment: the process's without the machine's agent settings, and its own flags."""
        own = {key: value for key, value in environ.items() if key not in HOST_VARIABLES}
        return {**own, configuration.ARGS_ENV: shlex.join(self.args)}

    def machine_ids(self) -> tuple[str, str]:
        """(machine-id, system UUID) of its own: hollow nodes must not all report the host's (kubemark's fake
        cadvisor makes them up too). Derived from the name, so stable across restarts."""
        digest = hashlib.sha256(f"kopflet-hollow/{self.name}".encode()).hexdigest()
        return digest[:32], f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def node_names(prefix: str, count: int) -> list[str]:
    """``<prefix>0`` .. ``<prefix>N-1``, checked as Node names (DNS-1123 subdomains)."""
    names = [f"{prefix}{index}" for index in range(count)]
    for name in names:
        if len(name) > 253 or not _NAME.fullmatch(name):
            raise PlanError(f"--name-prefix {prefix!r}: {name!r} is not a valid node name (lowercase letters, digits, "
                            "'-' and '.')")
    return names


def node_pod_cidr(base: str, index: int) -> str:
    """The `index`-th /24 of `base` (as the node IPAM controller gives each Node a podCIDR); PlanError if `base`
    has no such subnet."""
    try:
        network = ipaddress.ip_network(base, strict=False)
    except ValueError as exc:
        raise PlanError(f"--pod-cidr {base!r}: {exc}") from None
    prefix = NODE_POD_PREFIX if network.version == 4 else 120
    if network.prefixlen > prefix or index >= 2 ** (prefix - network.prefixlen):
        raise PlanError(f"--pod-cidr {base}: too small for node {index + 1}'s /{prefix}")
    return str(ipaddress.ip_network((int(network.network_address) + (index << (network.max_prefixlen - prefix)),
                                     prefix)))


def own_flag(arg: str) -> str | None:
    """The name of a per-node flag `arg` sets, else None."""
    match = _FLAG.fullmatch(arg)
    return match.group(1) if match and match.group(1) in OWN_FLAGS else None


def plan(options: HollowOptions) -> list[NodePlan]:
    """Every node's plan. PlanError when the options would make nodes share an identity, a file or a port."""
    if options.nodes < 1:
        raise PlanError(f"--nodes must be at least 1, got {options.nodes}")
    if not options.state_dir.startswith("/"):
        raise PlanError(f"--state-dir {options.state_dir!r} must be an absolute path")
    if not 1 <= options.port_base <= 65535 - options.nodes + 1:
        raise PlanError(f"--port-base {options.port_base}: the nodes' ports {options.port_base}..."
                        f"{options.port_base + options.nodes - 1} must lie in 1..65535")
    taken = sorted({flag for arg in options.kubelet_args if (flag := own_flag(arg))})
    if taken:
        raise PlanError(f"--{', --'.join(taken)}: set per hollow node by kopflet hollow")
    if not any(_FLAG.fullmatch(arg) and arg.lstrip("-").split("=")[0] == "bootstrap-kubeconfig"
               for arg in options.kubelet_args):
        raise PlanError("--bootstrap-kubeconfig is needed: each hollow node gets its own system:node:<name> "
                        "certificate through TLS bootstrap")
    plans = []
    for index, name in enumerate(node_names(options.name_prefix, options.nodes)):
        directory = posixpath.join(options.state_dir, name)
        port = options.port_base + index
        own = (f"--hostname-override={name}", f"--root-dir={posixpath.join(directory, 'root')}",
               f"--cert-dir={posixpath.join(directory, 'pki')}",
               f"--kubeconfig={posixpath.join(directory, KUBECONFIG)}",
               f"--container-runtime-endpoint=unix://{posixpath.join(directory, RUNTIME_SOCKET)}",
               f"--port={port}", "--healthz-port=0",
               # no cgroups: nothing runs (upstream's hollow kubelet runs with --cgroups-per-qos=false too)
               "--cgroups-per-qos=false", "--enforce-node-allocatable=none")
        node = NodePlan(index, name, directory, port, (*own, *options.kubelet_args),
                        node_pod_cidr(options.pod_cidr_base, index))
        longest = max(node.sockets(), key=lambda path: len(path.encode()))
        if len(longest.encode()) > MAX_SOCKET_PATH:
            raise PlanError(f"--state-dir {options.state_dir!r}: the socket {longest} is longer than a unix socket "
                            f"path's {MAX_SOCKET_PATH} bytes")
        plans.append(node)
    return plans


def _latency(text: str) -> tuple[str, float]:
    name, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=SECONDS")
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: {value!r} is not a number of seconds") from None
    return name.strip(), seconds


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kopflet hollow", allow_abbrev=False,
        description="Run N hollow kopflet nodes in this process against a real apiserver: each its own Node, Lease, "
                    "identity (TLS bootstrap) and pod watch, over a simulated container runtime. Other flags are "
                    "kubelet flags given to every node (--bootstrap-kubeconfig is needed).")
    p.add_argument("--nodes", type=int, required=True, help="how many hollow nodes to run")
    p.add_argument("--name-prefix", default=DEFAULT_NAME_PREFIX, help="node i is <prefix><i> (default %(default)s)")
    p.add_argument("--state-dir", default=DEFAULT_STATE_DIR,
                   help="each node's files go to <state-dir>/<name>/ (default %(default)s)")
    p.add_argument("--port-base", type=int, default=DEFAULT_PORT_BASE,
                   help="node i serves the kubelet API on port <port-base>+i (default %(default)s)")
    p.add_argument("--runtime-latency", choices=("default", "zero"), default="default",
                   help="the simulated runtime's call latencies: the measured containerd floor, or none (default "
                        "%(default)s)")
    p.add_argument("--runtime-latency-of", type=_latency, action="append", default=[], metavar="CALL=SECONDS",
                   help="one call's latency (run_sandbox, create, start, stop, pull, ...); repeatable")
    p.add_argument("--pod-cidr", default=DEFAULT_POD_CIDR_BASE,
                   help="node i's sandboxes get IPs from the i-th /24 of this range (default %(default)s)")
    return p


def parse_args(argv: Sequence[str]) -> HollowOptions:
    """The hollow options and the kubelet flags for every node (SystemExit with usage on a bad option)."""
    known, rest = parser().parse_known_args(list(argv))
    return HollowOptions(nodes=known.nodes, name_prefix=known.name_prefix, state_dir=known.state_dir,
                         port_base=known.port_base, latency=known.runtime_latency,
                         latency_overrides=tuple(known.runtime_latency_of), pod_cidr_base=known.pod_cidr,
                         kubelet_args=tuple(arg for arg in rest if arg != "--"))


__all__ = ["DEFAULT_NAME_PREFIX", "DEFAULT_PORT_BASE", "DEFAULT_STATE_DIR", "HollowOptions", "NodePlan", "PlanError",
           "node_names", "node_pod_cidr", "own_flag", "parse_args", "plan"]
