"""Service link variables, against upstream `getServiceEnvVarMap` + `envvars.FromServices`."""

from __future__ import annotations

import pytest

from kopflet.envvars.service_env import Service, ServicePort, service_env, visible_services

KUBERNETES = Service(namespace="default", name="kubernetes", cluster_ip="10.96.0.1",
                     ports=(ServicePort(name="https", port=443),))
WEB = Service(namespace="shop", name="web-front", cluster_ip="10.96.3.4",
              ports=(ServicePort(name="", port=80), ServicePort(name="metrics", port=9090, protocol="UDP")))
HEADLESS = Service(namespace="shop", name="db", cluster_ip="None", ports=(ServicePort(name="", port=5432),))
OTHER_NS = Service(namespace="other", name="api", cluster_ip="10.96.9.9", ports=(ServicePort(name="", port=8080),))
DEFAULT_NS_SVC = Service(namespace="default", name="web", cluster_ip="10.96.1.1", ports=(ServicePort(name="", port=1),))


@pytest.mark.parametrize(("namespace", "links", "expected"), [
    ("shop", True, ["kubernetes", "web-front"]),        # headless db skipped, other namespaces invisible
    ("shop", False, ["kubernetes"]),                    # the master service is always there
    ("default", True, ["kubernetes", "web"]),
    ("default", False, ["kubernetes"]),                 # other default-namespace services need links
    ("other", True, ["api", "kubernetes"]),
])
def test_visible_services(namespace: str, links: bool, expected: list[str]) -> None:
    found = visible_services([KUBERNETES, WEB, HEADLESS, OTHER_NS, DEFAULT_NS_SVC], namespace, links)
    assert [s.name for s in found] == expected


def test_same_namespace_service_overrides_the_master_one() -> None:
    own = Service(namespace="shop", name="kubernetes", cluster_ip="10.96.7.7", ports=(ServicePort(name="", port=1),))
    env = service_env([KUBERNETES, own], "shop")
    assert env["KUBERNETES_SERVICE_HOST"] == "10.96.7.7"  # upstream: same-namespace service overrides


def test_master_service_variables() -> None:
    assert service_env([KUBERNETES], "anywhere", enable_service_links=False) == {
        "KUBERNETES_SERVICE_HOST": "10.96.0.1",
        "KUBERNETES_SERVICE_PORT": "443",
        "KUBERNETES_SERVICE_PORT_HTTPS": "443",
        "KUBERNETES_PORT": "tcp://10.96.0.1:443",
        "KUBERNETES_PORT_443_TCP": "tcp://10.96.0.1:443",
        "KUBERNETES_PORT_443_TCP_PROTO": "tcp",
        "KUBERNETES_PORT_443_TCP_PORT": "443",
        "KUBERNETES_PORT_443_TCP_ADDR": "10.96.0.1",
    }


def test_names_dashes_protocols_and_unnamed_ports() -> None:
    env = service_env([WEB], "shop")
    assert env == {
        "WEB_FRONT_SERVICE_HOST": "10.96.3.4",
        "WEB_FRONT_SERVICE_PORT": "80",
        "WEB_FRONT_SERVICE_PORT_METRICS": "9090",
        "WEB_FRONT_PORT": "tcp://10.96.3.4:80",
        "WEB_FRONT_PORT_80_TCP": "tcp://10.96.3.4:80",
        "WEB_FRONT_PORT_80_TCP_PROTO": "tcp",
        "WEB_FRONT_PORT_80_TCP_PORT": "80",
        "WEB_FRONT_PORT_80_TCP_ADDR": "10.96.3.4",
        "WEB_FRONT_PORT_9090_UDP": "udp://10.96.3.4:9090",
        "WEB_FRONT_PORT_9090_UDP_PROTO": "udp",
        "WEB_FRONT_PORT_9090_UDP_PORT": "9090",
        "WEB_FRONT_PORT_9090_UDP_ADDR": "10.96.3.4",
    }


def test_ipv6_cluster_ip_is_bracketed_in_urls() -> None:
    v6 = Service(namespace="shop", name="v6", cluster_ip="fd00::1", ports=(ServicePort(name="", port=80),))
    env = service_env([v6], "shop")
    assert env["V6_PORT"] == "tcp://[fd00::1]:80" and env["V6_PORT_80_TCP_ADDR"] == "fd00::1"


@pytest.mark.parametrize(("obj", "expected"), [
    ({"metadata": {"namespace": "a", "name": "b"}, "spec": {"clusterIP": "10.0.0.1",
                                                           "ports": [{"port": 80, "protocol": "SCTP"}]}},
     Service(namespace="a", name="b", cluster_ip="10.0.0.1", ports=(ServicePort(name="", port=80, protocol="SCTP"),))),
    ({"metadata": {"namespace": "a", "name": "ext"}, "spec": {"type": "ExternalName"}},
     Service(namespace="a", name="ext", cluster_ip="")),
])
def test_from_object(obj: dict, expected: Service) -> None:
    assert Service.from_object(obj) == expected
