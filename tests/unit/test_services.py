"""Service link variables, against upstream `getServiceEnvVarMap` + `envvars.FromServices`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from kopflet.envvars import services
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


# ------------------------------------------------------------------------------- the cache (list + watch)


class FakeServiceApi:
    """/api/v1/services: one list, then the queued watch events."""

    def __init__(self, items: list[dict]) -> None:
        self.items = items
        self.events: asyncio.Queue[dict] = asyncio.Queue()
        self.calls: list[tuple[str, str]] = []

    async def request(self, method: str, path: str, **_: object) -> dict:
        self.calls.append((method, path))
        return {"metadata": {"resourceVersion": "5"}, "items": self.items}

    async def watch(self, path: str, resource_version: str, **_: object) -> AsyncIterator[dict]:
        self.calls.append(("WATCH", f"{path}?resourceVersion={resource_version}"))
        while True:
            yield await self.events.get()


def service_object(namespace: str, name: str, ip: str, port: int, version: str = "1") -> dict:
    return {"metadata": {"namespace": namespace, "name": name, "resourceVersion": version},
            "spec": {"clusterIP": ip, "ports": [{"port": port}]}}


async def test_the_cache_lists_then_follows_the_watch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(services, "SYNC_WAIT", 0.01)
    api = FakeServiceApi([service_object("shop", "web", "10.96.0.5", 80)])
    cache = services.ServiceCache(api)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="services have not yet been read at least once"):
        await cache.env("shop", True)
    assert await cache.env("shop", True, static=True) == {}  # a static pod gets what is known
    task = asyncio.create_task(cache.run())
    try:
        await asyncio.sleep(0.01)
        assert (await cache.env("shop", True))["WEB_SERVICE_HOST"] == "10.96.0.5"
        api.events.put_nowait({"type": "MODIFIED", "object": service_object("shop", "web", "10.96.0.6", 80, "6")})
        api.events.put_nowait({"type": "ADDED", "object": service_object("shop", "db", "10.96.0.7", 5432, "7")})
        await asyncio.sleep(0.01)
        env = await cache.env("shop", True)
        assert env["WEB_SERVICE_HOST"] == "10.96.0.6" and env["DB_SERVICE_PORT"] == "5432"
        api.events.put_nowait({"type": "DELETED", "object": service_object("shop", "db", "10.96.0.7", 5432, "8")})
        await asyncio.sleep(0.01)
        assert "DB_SERVICE_HOST" not in await cache.env("shop", True)
        assert api.calls == [("GET", "/api/v1/services"), ("WATCH", "/api/v1/services?resourceVersion=5")]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
