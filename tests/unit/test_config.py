"""kopflet.config.from_env: defaults, overrides and clear errors."""

from __future__ import annotations

import pytest

from kopflet.config import DEFAULT_RUNTIME_ENDPOINT, AgentConfig, ConfigError, from_env


@pytest.mark.parametrize(("environ", "hostname", "expected"), [
    ({}, "Worker-1", AgentConfig(node_name="worker-1")),
    ({"KOPFLET_NODE_NAME": "edge-7"}, "ignored", AgentConfig(node_name="edge-7")),
    ({"CONTAINER_RUNTIME_ENDPOINT": "unix:///run/x.sock"}, "n",
     AgentConfig(node_name="n", runtime_endpoint="unix:///run/x.sock")),
    ({"KOPFLET_RUNTIME_REQUEST_TIMEOUT": "30"}, "n", AgentConfig(node_name="n", runtime_request_timeout=30.0)),
])
def test_from_env(environ: dict[str, str], hostname: str, expected: AgentConfig) -> None:
    assert from_env(environ, hostname) == expected


@pytest.mark.parametrize(("environ", "message"), [
    ({"KOPFLET_NODE_NAME": "Not_Valid!"}, "KOPFLET_NODE_NAME"),
    ({"KOPFLET_NODE_NAME": "a" * 254}, "KOPFLET_NODE_NAME"),
    ({"CONTAINER_RUNTIME_ENDPOINT": "tcp://1.2.3.4:1"}, "unix://"),
    ({"KOPFLET_RUNTIME_REQUEST_TIMEOUT": "soon"}, "number of seconds"),
    ({"KOPFLET_RUNTIME_REQUEST_TIMEOUT": "0"}, "positive"),
])
def test_from_env_errors_name_the_setting(environ: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        from_env(environ, "node")


def test_defaults_match_the_upstream_kubelet() -> None:
    cfg = from_env({}, "n")
    assert cfg.runtime_endpoint == DEFAULT_RUNTIME_ENDPOINT == "unix:///run/containerd/containerd.sock"
    assert cfg.runtime_request_timeout == 120.0
    assert cfg.pod_field_selector == "spec.nodeName=n"
