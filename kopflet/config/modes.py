"""Cluster or standalone: whether the agent has an apiserver to speak to (upstream cmd/kubelet/app/server.go run).

Upstream decides on ``--kubeconfig`` alone: without it the kubelet logs "Standalone mode, no API client", sets its
clients to nil and runs only its static pods (``staticPodPath``, ``staticPodURL``): no Node, no Lease, no pod status,
no mirror pods, no watch of the API's pods, no events in the API, no Service environment variables. kopflet finds
credentials in more places without ``--kubeconfig`` (its login, `kopflet.certificate.login`: the in-cluster service
account, then ``$KUBECONFIG`` or ``~/.kube/config``), so it is standalone only when none of them is there.
``--bootstrap-kubeconfig`` and ``rotateCertificates`` need ``--kubeconfig`` (`kopflet.config.settings` refuses them
without it), so they are always cluster mode.

Standalone refuses what upstream's BuildAuth refuses without a client: webhook authentication or authorization
(upstream's messages, authentication first). A standalone node with no static pod source at all is allowed, as
upstream's (it runs nothing); kopflet says so. Pure.
"""

from __future__ import annotations

import dataclasses
import enum

from kopflet.config.settings import AgentConfig

STANDALONE_MODE = "Standalone mode, no API client"
"""upstream server.go run's log line."""
NO_CLIENT_WEBHOOK_AUTHENTICATION = "no client provided, cannot use webhook authentication"
"""upstream cmd/kubelet/app/auth.go BuildAuthn."""
NO_CLIENT_WEBHOOK_AUTHORIZATION = "no client provided, cannot use webhook authorization"
"""upstream cmd/kubelet/app/auth.go BuildAuthz."""
RUN_FAILED = "failed to run Kubelet"
"""upstream server.go Run: how an error of run() is reported (``failed to run Kubelet: <error>``)."""
NO_POD_SOURCE = ("standalone mode without a static pod source (--pod-manifest-path, --manifest-url): no pods will "
                 "run")
WEBHOOK_MODE = "Webhook"


class Mode(enum.Enum):
    CLUSTER = "cluster"
    """An apiserver client: the Node, its Lease and status, the pods bound to the node, their status."""
    STANDALONE = "standalone"
    """No apiserver client: static pods only (upstream's nil KubeClient, EventClient and HeartbeatClient)."""


@dataclasses.dataclass(frozen=True)
class ClientSources:
    """Where credentials were found besides ``--kubeconfig`` (the caller looks: environment and files)."""

    in_cluster: bool = False
    """A service account's environment (KUBERNETES_SERVICE_HOST and _PORT) and files, as the in-cluster login needs
    them."""
    kubeconfig_env: bool = False
    """``$KUBECONFIG`` is set and not empty (the login takes it; a wrong path is that login's error, not
    standalone)."""
    default_kubeconfig: bool = False
    """``~/.kube/config`` is a file."""


@dataclasses.dataclass(frozen=True)
class Decision:
    mode: Mode
    refusal: str = ""
    """Upstream's error when the configuration cannot run in this mode ("" when it can); reported as
    ``failed to run Kubelet: <refusal>``."""
    warnings: tuple[str, ...] = ()
    """What the mode leaves without effect, said at start (kopflet says it; upstream is silent)."""


def decide(cfg: AgentConfig, sources: ClientSources) -> Decision:
    """The mode for `cfg` with the credentials `sources` found, and its refusal and warnings."""
    if cfg.kubeconfig or cfg.bootstrap_kubeconfig or sources.in_cluster or sources.kubeconfig_env \
            or sources.default_kubeconfig:
        return Decision(Mode.CLUSTER)
    # upstream BuildAuth with a nil client: BuildAuthn first, then BuildAuthz
    if cfg.authentication_token_webhook:
        return Decision(Mode.STANDALONE, refusal=NO_CLIENT_WEBHOOK_AUTHENTICATION)
    if cfg.authorization_mode == WEBHOOK_MODE:
        return Decision(Mode.STANDALONE, refusal=NO_CLIENT_WEBHOOK_AUTHORIZATION)
    warnings = () if cfg.pod_manifest_path or cfg.static_pod_url else (NO_POD_SOURCE,)
    return Decision(Mode.STANDALONE, warnings=warnings)
