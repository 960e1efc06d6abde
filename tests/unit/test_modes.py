"""kopflet.config.modes: cluster or standalone mode, and what standalone refuses (upstream cmd/kubelet/app/server.go
run and auth.go BuildAuth)."""

from __future__ import annotations

from typing import Any

import pytest

from kopflet.config import settings
from kopflet.config.modes import (
    NO_CLIENT_WEBHOOK_AUTHENTICATION,
    NO_CLIENT_WEBHOOK_AUTHORIZATION,
    NO_POD_SOURCE,
    ClientSources,
    Decision,
    Mode,
    decide,
)
from kopflet.config.settings import AgentConfig

NONE = ClientSources()
OPEN = {"authentication_token_webhook": False, "authorization_mode": "AlwaysAllow"}  # what standalone can serve
STATIC = {"pod_manifest_path": "/etc/kubernetes/manifests"}


@pytest.mark.parametrize(("config", "sources", "expected"), [
    # any credentials: cluster mode, whatever the authentication (the webhooks have a client)
    ({"kubeconfig": "/etc/kopflet/node.kubeconfig"}, NONE, Decision(Mode.CLUSTER)),
    ({"kubeconfig": "/k", "bootstrap_kubeconfig": "/b"}, NONE, Decision(Mode.CLUSTER)),
    ({}, ClientSources(in_cluster=True), Decision(Mode.CLUSTER)),
    ({}, ClientSources(kubeconfig_env=True), Decision(Mode.CLUSTER)),
    ({}, ClientSources(default_kubeconfig=True), Decision(Mode.CLUSTER)),
    ({"kubeconfig": "/k", **OPEN}, NONE, Decision(Mode.CLUSTER)),
    ({"kubeconfig": "/k"}, NONE, Decision(Mode.CLUSTER)),  # no pod source: the API's pods
    # none: standalone, static pods only
    ({**OPEN, **STATIC}, NONE, Decision(Mode.STANDALONE)),
    ({**OPEN, "static_pod_url": "https://config.example/pods.yaml"}, NONE, Decision(Mode.STANDALONE)),
    # no pod source at all: allowed, as upstream (it runs nothing), with a warning
    (OPEN, NONE, Decision(Mode.STANDALONE, warnings=(NO_POD_SOURCE,))),
    # upstream BuildAuth without a client: the authenticator first, then the authorizer
    ({**STATIC}, NONE, Decision(Mode.STANDALONE, refusal=NO_CLIENT_WEBHOOK_AUTHENTICATION)),
    ({**STATIC, "authorization_mode": "AlwaysAllow"}, NONE,
     Decision(Mode.STANDALONE, refusal=NO_CLIENT_WEBHOOK_AUTHENTICATION)),
    ({**STATIC, "authentication_token_webhook": False}, NONE,
     Decision(Mode.STANDALONE, refusal=NO_CLIENT_WEBHOOK_AUTHORIZATION)),
    ({"authentication_token_webhook": False}, NONE, Decision(Mode.STANDALONE, refusal=NO_CLIENT_WEBHOOK_AUTHORIZATION)),
])
def test_decide(config: dict[str, Any], sources: ClientSources, expected: Decision) -> None:
    assert decide(AgentConfig(node_name="n", **config), sources) == expected


def test_the_refusals_are_upstreams_words() -> None:
    # cmd/kubelet/app/auth.go BuildAuthn and BuildAuthz, v1.37.1
    assert NO_CLIENT_WEBHOOK_AUTHENTICATION == "no client provided, cannot use webhook authentication"
    assert NO_CLIENT_WEBHOOK_AUTHORIZATION == "no client provided, cannot use webhook authorization"


def test_flags_alone_as_a_standalone_kubelet_is_started() -> None:
    """The flags a standalone node is started with, through the real configuration loader."""
    cfg = settings.load(["--pod-manifest-path=/etc/kubernetes/manifests", "--authentication-token-webhook=false",
                         "--authorization-mode=AlwaysAllow", "--anonymous-auth"], {}, "edge-1", lambda _: "")
    assert decide(cfg, NONE) == Decision(Mode.STANDALONE)
    assert decide(settings.load([], {}, "edge-1", lambda _: ""), NONE).refusal == NO_CLIENT_WEBHOOK_AUTHENTICATION
