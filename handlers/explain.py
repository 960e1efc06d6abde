"""``kopflet explain <namespace>/<pod>``: why a pod is in its state, as the agent running it decided.

It reads the agent's ``/debug/pods/<namespace>/<name>`` (`kopflet.pods.explain`) through the apiserver's node proxy,
``/api/v1/nodes/<node>/proxy/debug/pods/<namespace>/<name>?format=text``, as ``kubectl get --raw`` would, with
kopflet's own client: the node is the pod's ``spec.nodeName`` unless ``--node`` names it. The credentials are
kubectl's: ``--kubeconfig``, else the first file of ``$KUBECONFIG``, else ``~/.kube/config``, else the in-cluster
service account; they need ``get`` on the pod (without ``--node``) and on ``nodes/proxy``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import aiohttp

from kopflet import gotext
from kopflet.certificate import bootstrap
from kopflet.client.kubeapi import API_ERRORS, Credentials, KubeApiError, KubeClient, q

USAGE_ERROR = 2
FAILED = 1
PROG = "kopflet explain"
DEFAULT_KUBECONFIG = "~/.kube/config"
SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


class ExplainError(Exception):
    """The explanation could not be had; the message says why."""


@dataclasses.dataclass(frozen=True)
class Args:
    namespace: str
    name: str
    node: str = ""
    kubeconfig: str = ""
    output: str = "text"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Show the kopflet agent's last decisions for a pod: their inputs, the rules that "
                               "fired, what the pod waits for and what the agent does next; then where its last "
                               "start's time went, step by step.")
    parser.add_argument("pod", metavar="<namespace>/<pod>", help="the pod (a name alone is in --namespace)")
    parser.add_argument("-n", "--namespace", default="default", help="the pod's namespace when not given with it")
    parser.add_argument("--node", default="", help="the node whose agent to ask (default: the pod's spec.nodeName)")
    parser.add_argument("--kubeconfig", default="", help="credentials for the apiserver (default: $KUBECONFIG, "
                                                         "~/.kube/config, else in-cluster)")
    parser.add_argument("-o", "--output", choices=("text", "json"), default="text", help="text (default) or json")
    return parser


def parse_args(argv: Sequence[str]) -> Args:
    """The command line; SystemExit(2) with argparse's message when it does not parse."""
    parser = _parser()
    ns = parser.parse_args(list(argv))
    namespace, name = ns.namespace, ns.pod
    if "/" in ns.pod:
        namespace, _, name = ns.pod.partition("/")
    if not namespace or not name or "/" in name:
        parser.error(f"expected <namespace>/<pod>, got {gotext.go_quote(ns.pod)}")
    return Args(namespace=namespace, name=name, node=ns.node, kubeconfig=ns.kubeconfig, output=ns.output)


def kubeconfig_path(flag: str, environ: Mapping[str, str]) -> str:
    """Where kubectl would read its credentials: the flag, else the first existing file of ``$KUBECONFIG``, else
    ``~/.kube/config`` if it exists; "" for none (then the in-cluster service account)."""
    if flag:
        return flag
    listed = environ.get("KUBECONFIG")
    if listed:
        return next((p for p in listed.split(os.pathsep) if p and os.path.isfile(p)), "")
    default = os.path.expanduser(DEFAULT_KUBECONFIG)
    return default if os.path.isfile(default) else ""


def in_cluster(environ: Mapping[str, str]) -> Credentials | None:
    """The pod's service account, as client-go's InClusterConfig finds it; None outside a pod. Blocking."""
    host, port = environ.get("KUBERNETES_SERVICE_HOST", ""), environ.get("KUBERNETES_SERVICE_PORT", "")
    token_file = f"{SERVICE_ACCOUNT}/token"
    if not (host and port and os.path.isfile(token_file)):
        return None
    with open(token_file, encoding="utf-8") as f:
        token = f.read().strip()
    return Credentials(server=f"https://{gotext.join_host_port(host, port)}", ca_path=f"{SERVICE_ACCOUNT}/ca.crt",
                       token=token)


async def credentials(flag: str, environ: Mapping[str, str]) -> Credentials:
    """kopflet's client credentials, looked for where kubectl looks (`kubeconfig_path`, then in-cluster)."""
    path = await asyncio.to_thread(kubeconfig_path, flag, environ)
    if path:
        try:
            config = await bootstrap.read_client_config(path, "kubeconfig")
            return await bootstrap.credentials_for(config, f"kubeconfig {path}")
        except bootstrap.BootstrapError as exc:
            raise ExplainError(str(exc)) from None
    found = await asyncio.to_thread(in_cluster, environ)
    if found is None:
        raise ExplainError("no credentials for the apiserver (--kubeconfig, KUBECONFIG, ~/.kube/config or in-cluster)")
    return found


class Client(Protocol):
    async def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    async def get_text(self, path: str, *, params: Mapping[str, str] | None = None) -> str: ...


def debug_path(node: str, namespace: str, name: str) -> str:
    """The agent's ``/debug/pods/<namespace>/<name>`` through the apiserver's node proxy."""
    return f"/api/v1/nodes/{q(node)}/proxy/debug/pods/{q(namespace)}/{q(name)}"


async def fetch(client: Client, args: Args) -> str:
    """The agent's answer for the pod, through the apiserver."""
    node = args.node
    if not node:
        pod = await client.get_pod(args.namespace, args.name)
        if pod is None:
            raise ExplainError(f"pod {args.namespace}/{args.name} not found")
        spec = pod.get("spec")
        node = str(spec.get("nodeName") or "") if isinstance(spec, dict) else ""
        if not node:
            raise ExplainError(f"pod {args.namespace}/{args.name} is not bound to a node yet: no agent has decided "
                               "anything about it (kubectl describe pod shows the scheduler's events)")
    try:
        return await client.get_text(debug_path(node, args.namespace, args.name), params={"format": args.output})
    except KubeApiError as exc:
        if exc.status == 404 and not exc.reason:
            # the agent's own answer (pod "x" does not exist), or a path this agent does not serve
            raise ExplainError(f"node {node}: {exc.message} (is the pod on this node, and is its agent kopflet?)") \
                from None
        reason = f" {exc.reason}" if exc.reason else ""
        raise ExplainError(f"node {node}: {exc.status}{reason}: {exc.message}") from None


async def run(args: Args, environ: Mapping[str, str]) -> str:
    client = KubeClient(await credentials(args.kubeconfig, environ), user_agent="kopflet-explain")
    try:
        return await fetch(client, args)
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        raise ExplainError(f"cannot reach the apiserver at {client.credentials.server}: "
                           f"{exc or type(exc).__name__}") from None
    finally:
        await client.close()


def main(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> int:
    """``kopflet explain ...``: the exit status (2 for a bad command line, 1 when it failed)."""
    try:
        args = parse_args(argv)
    except SystemExit as exc:  # --help (0), or argparse's usage error already printed (2)
        return exc.code if isinstance(exc.code, int) else USAGE_ERROR
    try:
        text = asyncio.run(run(args, os.environ if environ is None else environ))
    except ExplainError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return FAILED
    except API_ERRORS as exc:  # the pod's GET refused (403 ...)
        print(f"{PROG}: {exc}", file=sys.stderr)
        return FAILED
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0
