"""kopflet.hollow.plan: what each hollow node of ``kopflet hollow --nodes N`` is given, and what is refused."""

from __future__ import annotations

import shlex

import pytest

from kopflet.config import settings as configuration
from kopflet.hollow import plan as hollow

BOOTSTRAP = "--bootstrap-kubeconfig=/etc/kopflet/bootstrap.conf"


def options(**changes: object) -> hollow.HollowOptions:
    values: dict[str, object] = {"nodes": 3, "state_dir": "/var/lib/h", "kubelet_args": (BOOTSTRAP,)}
    return hollow.HollowOptions(**{**values, **changes})  # type: ignore[arg-type]


def config(node: hollow.NodePlan, environ: dict[str, str] | None = None) -> configuration.AgentConfig:
    env = node.environ(environ or {})
    return configuration.from_env(env, "the-host", lambda path: "", None, "/")


def test_each_node_gets_its_own_name_identity_files_port_and_pod_range() -> None:
    plans = hollow.plan(options(name_prefix="hn-", port_base=20000))
    assert [p.name for p in plans] == ["hn-0", "hn-1", "hn-2"]
    configs = [config(p) for p in plans]
    for index, (node, cfg) in enumerate(zip(plans, configs, strict=True)):
        assert cfg.node_name == node.name == f"hn-{index}"
        assert cfg.root_dir == f"/var/lib/h/hn-{index}/root"
        assert cfg.cert_directory == f"/var/lib/h/hn-{index}/pki"
        assert cfg.kubeconfig == node.kubeconfig == f"/var/lib/h/hn-{index}/kubelet.conf"
        assert cfg.bootstrap_kubeconfig == "/etc/kopflet/bootstrap.conf"
        assert cfg.runtime_endpoint == cfg.image_endpoint == node.endpoint == f"unix:///var/lib/h/hn-{index}/hollow.sock"
        assert cfg.port == node.port == 20000 + index
        assert cfg.healthz_port == 0
        assert (cfg.cgroups_per_qos, cfg.enforce_node_allocatable) == (False, ("none",))
        assert cfg.pod_field_selector == f"spec.nodeName=hn-{index}"
        assert node.pod_cidr == f"10.224.{index}.0/24"
    assert len({p.machine_ids() for p in plans}) == 3


def test_the_machine_agents_settings_do_not_reach_a_hollow_node() -> None:
    [node] = hollow.plan(options(nodes=1))
    host = {"KOPFLET_ARGS": "--hostname-override=vm --root-dir=/var/lib/kopflet", "KOPFLET_CONFIG": "/etc/k.yaml",
            "NODE_NAME": "vm", "KOPFLET_NODE_NAME": "vm", "KOPFLET_NODE_IP": "10.0.0.9",
            "CONTAINER_RUNTIME_ENDPOINT": "unix:///run/containerd.sock", "PATH": "/bin"}
    env = node.environ(host)
    assert env["PATH"] == "/bin"
    assert not {"KOPFLET_CONFIG", "NODE_NAME", "KOPFLET_NODE_NAME", "KOPFLET_NODE_IP",
                "CONTAINER_RUNTIME_ENDPOINT"} & set(env)
    assert shlex.split(env["KOPFLET_ARGS"]) == list(node.args)
    cfg = config(node, host)
    assert (cfg.node_name, cfg.node_ip) == ("hollow-node-0", "")
    assert cfg.kubeconfig == "/var/lib/h/hollow-node-0/kubelet.conf"


def test_the_users_kubelet_flags_reach_every_node() -> None:
    plans = hollow.plan(options(nodes=2, kubelet_args=(BOOTSTRAP, "--max-pods=30", "--node-labels=kind=hollow")))
    for cfg in map(config, plans):
        assert cfg.max_pods == 30
        assert dict(cfg.node_labels) == {"kind": "hollow"}


@pytest.mark.parametrize(("changes", "error"), [
    ({"nodes": 0}, "--nodes must be at least 1"),
    ({"state_dir": "state"}, "must be an absolute path"),
    ({"port_base": 65535, "nodes": 2}, "must lie in 1..65535"),
    ({"port_base": 0}, "must lie in 1..65535"),
    ({"kubelet_args": ()}, "--bootstrap-kubeconfig is needed"),
    ({"kubelet_args": ("--kubeconfig=/etc/node.conf",)}, "--kubeconfig: set per hollow node"),
    ({"kubelet_args": (BOOTSTRAP, "--hostname-override=x", "--root-dir", "/r")},
     "--hostname-override, --root-dir: set per hollow node"),
    ({"kubelet_args": (BOOTSTRAP, "--port=10250")}, "--port: set per hollow node"),
    ({"name_prefix": "Hollow_"}, "is not a valid node name"),
    ({"state_dir": "/" + "d" * 80}, "longer than a unix socket path's 107 bytes"),
    ({"nodes": 257, "pod_cidr_base": "10.88.0.0/16"}, "too small for node 257's /24"),
    ({"pod_cidr_base": "not-a-cidr"}, "--pod-cidr 'not-a-cidr'"),
])
def test_options_that_would_make_nodes_share_something_are_refused(changes: dict[str, object], error: str) -> None:
    with pytest.raises(hollow.PlanError, match=error.replace(".", r"\.").replace("'", "'")):
        hollow.plan(options(**changes))


def test_the_bootstrap_kubeconfig_may_be_given_as_two_arguments() -> None:
    [node] = hollow.plan(options(nodes=1, kubelet_args=("--bootstrap-kubeconfig", "/b.conf")))
    assert config(node).bootstrap_kubeconfig == "/b.conf"


@pytest.mark.parametrize(("base", "index", "cidr"), [
    ("10.224.0.0/12", 0, "10.224.0.0/24"),
    ("10.224.0.0/12", 1, "10.224.1.0/24"),
    ("10.224.0.0/12", 4095, "10.239.255.0/24"),
    ("10.88.0.0/16", 255, "10.88.255.0/24"),
    ("10.88.7.0/24", 0, "10.88.7.0/24"),
    ("fd00::/64", 2, "fd00::200/120"),
])
def test_node_pod_cidrs_are_consecutive_subnets(base: str, index: int, cidr: str) -> None:
    assert hollow.node_pod_cidr(base, index) == cidr


@pytest.mark.parametrize(("base", "index"), [("10.88.7.0/24", 1), ("10.88.7.0/25", 0), ("10.0.0.0/16", 256)])
def test_a_range_without_the_nodes_subnet_is_refused(base: str, index: int) -> None:
    with pytest.raises(hollow.PlanError, match="too small"):
        hollow.node_pod_cidr(base, index)


@pytest.mark.parametrize(("argv", "expected"), [
    (["--nodes", "5", BOOTSTRAP], {"nodes": 5, "kubelet_args": (BOOTSTRAP,)}),
    (["--nodes=2", "--name-prefix=x-", "-v=4", "--", BOOTSTRAP],
     {"nodes": 2, "name_prefix": "x-", "kubelet_args": ("-v=4", BOOTSTRAP)}),
    (["--nodes=1", "--runtime-latency=zero", "--runtime-latency-of", "start=0.5", "--runtime-latency-of=pull=2"],
     {"latency": "zero", "latency_overrides": (("start", 0.5), ("pull", 2.0)), "kubelet_args": ()}),
    (["--nodes=1", "--port-base=30000", "--state-dir=/s", "--pod-cidr=10.0.0.0/8"],
     {"port_base": 30000, "state_dir": "/s", "pod_cidr_base": "10.0.0.0/8"}),
])
def test_hollow_options_are_parsed_and_the_rest_are_kubelet_flags(argv: list[str],
                                                                  expected: dict[str, object]) -> None:
    parsed = hollow.parse_args(argv)
    for name, value in expected.items():
        assert getattr(parsed, name) == value, name


@pytest.mark.parametrize("argv", [[], ["--nodes=x"], ["--nodes=1", "--runtime-latency=slow"],
                                  ["--nodes=1", "--runtime-latency-of=start"]])
def test_bad_hollow_options_are_usage_errors(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        hollow.parse_args(argv)
    assert exc.value.code == 2


@pytest.mark.parametrize(("arg", "flag"), [
    ("--kubeconfig=/x", "kubeconfig"), ("--port", "port"), ("-port=1", "port"), ("--max-pods=3", None),
    ("/some/value", None), ("--portable", None)])
def test_own_flags_are_recognised(arg: str, flag: str | None) -> None:
    assert hollow.own_flag(arg) == flag
