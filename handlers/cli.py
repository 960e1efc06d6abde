"""The ``kopflet`` command: the upstream kubelet's flags, checked first, then the operator in this process.

``kopflet --kubeconfig=/etc/kopflet/node.kubeconfig --hostname-override=edge-1 --cluster-dns=10.96.0.10`` is
``KOPFLET_ARGS='...' kopf run --standalone --all-namespaces operator/main.py``, except that a bad flag or config
file is reported (exit status 2) before anything starts. Either way the agent serves ``/healthz`` on
``--healthz-bind-address``:``--healthz-port`` itself (`kopflet.server.healthz_server`), not Kopf's ``--liveness``.
The flags travel to the agent's start-up handler in ``KOPFLET_ARGS``, exactly as under ``kopf run``.

Without any credentials (no ``--kubeconfig``, in-cluster service account, ``$KUBECONFIG`` or ``~/.kube/config``) the
agent runs standalone, static pods only, without Kopf (`handlers.standalone`; upstream's "Standalone mode, no API
client"); a configuration standalone mode cannot run (webhook authentication or authorization) is upstream's
``failed to run Kubelet: ...`` and exit status 1.

``kopflet explain <namespace>/<pod>`` is a command of its own (`handlers.explain`): it asks a running agent, through
the apiserver, why a pod is in its state. ``kopflet hollow --nodes N`` runs N hollow nodes (`handlers.hollow`).
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Sequence
from importlib import metadata

import kopf

import handlers  # noqa: F401  (registers every handler, as operator/main.py does for `kopf run`)
from handlers import configuring, explain, standalone
from kopflet.config import modes
from kopflet.config import settings as configuration
from kopflet.config.upstream_feature_gates import KUBERNETES_VERSION
from kopflet.hooks import loader as hook_loader
from kopflet.logs import setup as logs_setup

USAGE_ERROR = 2
RUN_ERROR = 1
"""upstream's exit status when run() fails (cli.Run: a command's error)."""


def _version() -> str:
    try:
        return metadata.version("kopflet")
    except metadata.PackageNotFoundError:
        return "unknown"


def version_line(program: str) -> str:
    """``--version``. Installed as the node's ``kubelet`` (kubeadm runs ``kubelet --version`` in its preflight and
    parses upstream's ``Kubernetes vX.Y.Z``), the answer is upstream's line for the release kopflet follows, with
    kopflet's own version as build metadata, which semver leaves out of version comparisons."""
    if os.path.basename(program) == "kubelet":
        return f"Kubernetes {KUBERNETES_VERSION}+kopflet.{_version()}"
    return f"kopflet {_version()} (Kubernetes {KUBERNETES_VERSION})"


def _wants(args: Sequence[str], *flags: str) -> bool:
    head = list(args)[:list(args).index("--")] if "--" in args else list(args)
    return any(arg in flags for arg in head)


SUBCOMMANDS = ("\nOther commands:\n"
               "  kopflet explain <namespace>/<pod>   the agent's last decisions for a pod (kopflet explain --help)\n"
               "  kopflet hollow --nodes N ...        N hollow nodes in this process (kopflet hollow --help)\n")


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["explain"]:
        return explain.main(args[1:])
    if args[:1] == ["hollow"]:
        from handlers import hollow  # only here: it brings the simulated runtime's gRPC server

        return hollow.main(args[1:])
    if _wants(args, "-h", "--help"):
        sys.stdout.write(configuration.usage("kopflet") + SUBCOMMANDS)
        return 0
    if _wants(args, "--version"):
        print(version_line(sys.argv[0] if argv is None else "kopflet"))
        return 0

    try:
        all_args = configuration.split_args(os.environ.get(configuration.ARGS_ENV, "")) + args
        cfg = configuring.load_agent_config({**os.environ, configuration.ARGS_ENV: shlex.join(all_args)})
    except configuration.ConfigError as exc:
        print(f"kopflet: {exc}\nRun 'kopflet --help' for usage.", file=sys.stderr)
        return USAGE_ERROR
    if cfg.kubeconfig and not os.path.isfile(cfg.kubeconfig):
        # With --bootstrap-kubeconfig the file is written once the node has its certificate (LoadClientCert).
        if not cfg.bootstrap_kubeconfig:
            print(f"kopflet: --kubeconfig {cfg.kubeconfig}: no such file", file=sys.stderr)
            return USAGE_ERROR
        if not os.path.isfile(cfg.bootstrap_kubeconfig):
            print(f"kopflet: --bootstrap-kubeconfig {cfg.bootstrap_kubeconfig}: no such file (and --kubeconfig "
                  f"{cfg.kubeconfig} is not there yet)", file=sys.stderr)
            return USAGE_ERROR
    try:  # a policy hook module that cannot be imported is a bad flag too (the agent imports it again: a no-op)
        hook_loader.load(cfg.hooks, entry_points=cfg.hook_entry_points)
    except hook_loader.HookLoadError as exc:
        print(f"kopflet: {exc}", file=sys.stderr)
        return USAGE_ERROR
    decision = configuring.decide_mode(cfg)
    if decision.refusal:  # upstream run: BuildAuth without a client, before anything starts
        print(f"kopflet: {modes.RUN_FAILED}: {decision.refusal}", file=sys.stderr)
        return RUN_ERROR
    os.environ[configuration.ARGS_ENV] = shlex.join(all_args)

    # upstream logsapi.ValidateAndApply: the format, -v, --vmodule, the format's output routing and the flush
    # daemon (kopf.configure's place; `kopf run` keeps it)
    routing = cfg.log_routing
    logs_setup.apply(cfg.log_format, cfg.log_verbosity, cfg.log_vmodule, split_stream=routing.split_stream,
                     info_buffer_bytes=routing.info_buffer_bytes, flush_frequency=cfg.log_flush_frequency)
    if decision.mode is modes.Mode.STANDALONE:
        return standalone.main(decision)
    kopf.run(standalone=True, clusterwide=True)  # Kopf's standalone: no peering (a cluster-mode agent)
    return 0


if __name__ == "__main__":
    sys.exit(main())
