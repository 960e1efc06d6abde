"""The CPU manager's settings: cpuManagerPolicy (--cpu-manager-policy), cpuManagerPolicyOptions
(--cpu-manager-policy-options), cpuManagerReconcilePeriod (--cpu-manager-reconcile-period), reservedSystemCPUs
(--reserved-cpus), and upstream's start-up checks of them that need no topology."""

from __future__ import annotations

import pytest

from kopflet.config.settings import AgentConfig, ConfigError
from tests.unit.test_config import run, with_file


def test_defaults() -> None:
    cfg = run()
    assert (cfg.cpu_manager_policy, dict(cfg.cpu_manager_policy_options), cfg.cpu_manager_reconcile_period,
            cfg.reserved_system_cpus) == ("none", {}, 10.0, "")  # v1beta1 defaults.go


@pytest.mark.parametrize(("argv", "expected"), [
    (["--cpu-manager-policy=static", "--reserved-cpus=0"],
     {"cpu_manager_policy": "static", "reserved_system_cpus": "0"}),
    (["--cpu-manager-policy", "static", "--kube-reserved=cpu=1"],
     {"cpu_manager_policy": "static", "kube_reserved": {"cpu": "1"}}),
    # one key=value per flag (upstream's NoSplit map): repeated flags merge, the last value of a key wins
    (["--cpu-manager-policy=static", "--system-reserved=cpu=500m", "--cpu-manager-policy-options=full-pcpus-only=true",
      "--cpu-manager-policy-options", "strict-cpu-reservation = false",
      "--cpu-manager-policy-options=full-pcpus-only=false"],
     {"cpu_manager_policy": "static", "system_reserved": {"cpu": "500m"},
      "cpu_manager_policy_options": {"full-pcpus-only": "false", "strict-cpu-reservation": "false"}}),
    (["--cpu-manager-reconcile-period=1m30s"], {"cpu_manager_reconcile_period": 90.0}),
    (["--reserved-cpus=0-1,3"], {"reserved_system_cpus": "0-1,3"}),  # the none policy takes it too
])
def test_flags(argv: list[str], expected: dict[str, object]) -> None:
    assert run(argv) == AgentConfig(node_name="node-1", **expected)  # type: ignore[arg-type]


def test_config_file_and_flag_precedence() -> None:
    body = ("cpuManagerPolicy: static\ncpuManagerPolicyOptions: {full-pcpus-only: \"true\"}\n"
            "cpuManagerReconcilePeriod: 0s\nreservedSystemCPUs: \"1\"\n")
    cfg = with_file(body)
    assert (cfg.cpu_manager_policy, dict(cfg.cpu_manager_policy_options), cfg.cpu_manager_reconcile_period,
            cfg.reserved_system_cpus) == ("static", {"full-pcpus-only": "true"}, 10.0, "1")  # 0s: the default
    # flags beat the file: the none policy refuses the file's options
    with pytest.raises(ConfigError, match=r"None policy: received unsupported options=map\[full-pcpus-only:true\]"):
        with_file(body, "--cpu-manager-policy=none")
    cfg = with_file(body, "--reserved-cpus=0", "--cpu-manager-reconcile-period=5s")
    assert (cfg.reserved_system_cpus, cfg.cpu_manager_reconcile_period) == ("0", 5.0)


@pytest.mark.parametrize(("argv", "message"), [
    (["--cpu-manager-policy=Static"], 'unknown policy: "Static"'),
    (["--cpu-manager-policy=static"], "[cpumanager] unable to determine reserved CPU resources for static policy"),
    (["--cpu-manager-policy=static", "--kube-reserved=cpu=0", "--system-reserved=memory=1Gi"],
     "[cpumanager] unable to determine reserved CPU resources for static policy"),
    (["--cpu-manager-policy-options=full-pcpus-only=true"],
     "new none policy error: None policy: received unsupported options=map[full-pcpus-only:true]"),
    (["--cpu-manager-policy=static", "--reserved-cpus=1", "--cpu-manager-policy-options=align-by-socket=true"],
     'new static policy error: CPU Manager Policy Alpha-level Options not enabled, but option "align-by-socket" '
     'provided'),
    (["--cpu-manager-policy=static", "--reserved-cpus=1", "--cpu-manager-policy-options=full-pcpus-only=yes"],
     'new static policy error: bad value for option "full-pcpus-only": strconv.ParseBool: parsing "yes": '
     'invalid syntax'),
    (["--cpu-manager-policy=static", "--reserved-cpus=1",
      "--cpu-manager-policy-options=distribute-cpus-across-numa=true"],
     'new static policy error: unsupported cpumanager option: "distribute-cpus-across-numa" (true)'),
    (["--reserved-cpus=0-"], 'invalid configuration: unable to parse reservedSystemCPUs (--reserved-cpus) 0-, '
                             'error: strconv.Atoi: parsing "": invalid syntax'),
    (["--cpu-manager-policy-options=full-pcpus-only"], "--cpu-manager-policy-options: malformed pair, expect "
                                                       "string=string"),
    (["--cpu-manager-reconcile-period=0s"], "--cpu-manager-reconcile-period: must be a positive duration"),
])
def test_refused(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        run(argv)
    assert str(err.value).startswith(message)


def test_reserved_cpus_satisfy_the_static_policy_without_reserved_cpu() -> None:
    """reservedSystemCPUs replaces systemReserved + kubeReserved cpu (upstream server.go), so it alone is enough."""
    cfg = with_file("cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\nkubeReserved: {cpu: \"0\"}\n")
    assert cfg.cpu_manager_policy == "static"
    # the configuration keeps what was written (/configz shows it so, as upstream's is rendered before the override)
    assert dict(cfg.kube_reserved) == {"cpu": "0"}
