"""CSI driver registration (upstream csi_plugin.go RegistrationHandler): the version rules and their messages as
tables, then whole registrations the way node-driver-registrar makes them: a fake registrar (the plugin
registration service) and a fake driver (CSI Identity and Node) on temporary unix sockets, the real plugin
manager, registration handler and node info manager, and an in-memory apiserver."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import pytest

from kopflet.pluginmanager import cache
from kopflet.pluginmanager.plugin_manager import PluginManager
from kopflet.volumes.csi.handler import RegistrationError, RegistrationHandler, new_csi_driver_client
from kopflet.volumes.csi.nodeinfo import ANNOTATION_KEY_NODE_ID
from kopflet.volumes.csi.nodeinfomanager import NodeInfoManager
from kopflet.volumes.csi.registration import (
    Driver,
    DriversStore,
    ValidationError,
    Version,
    VersionError,
    highest_supported_version,
    validate_versions,
)
from tests.unit.csi_fakes import FakeDriver, FakeKube, FakeRegistrar, short_tmpdir

# ------------------------------------------------------------------------------------------------ versions


@pytest.mark.parametrize(("text", "expected"), [
    ("1.0.0", "1.0.0"), ("v1.2", "1.2"), ("1.5.0-rc.1", "1.5.0"), (" 1.3 ", "1.3"), ("0.3.0", "0.3.0"),
    ("1.2.3.4", "1.2.3.4"), ("10.01", "10.1"),
])
def test_parse_generic(text: str, expected: str) -> None:
    assert str(Version.parse_generic(text)) == expected


@pytest.mark.parametrize(("text", "error"), [
    ("", 'could not parse "" as version'),
    ("abc", 'could not parse "abc" as version'),
    ("1", 'illegal version string "1"'),
    ("v2", 'illegal version string "v2"'),
    ("01.0", 'illegal zero-prefixed version component "01" in "01.0"'),
    ("1.0\n", 'could not parse "1.0\\n" as version'),
])
def test_parse_generic_errors(text: str, error: str) -> None:
    with pytest.raises(VersionError) as caught:
        Version.parse_generic(text)
    assert str(caught.value) == error


@pytest.mark.parametrize(("a", "b", "less"), [
    ("1.0", "1.0.0", False), ("1.0.0", "1.0", False), ("1.0", "1.0.1", True), ("1.2", "1.10", True),
    ("1.10.0", "1.9.9", False),
])
def test_versions_compare_as_upstreams(a: str, b: str, less: bool) -> None:
    assert (Version.parse_generic(a) < Version.parse_generic(b)) is less
    if a in ("1.0", "1.0.0") and b in ("1.0", "1.0.0"):
        assert Version.parse_generic(a) == Version.parse_generic(b)


@pytest.mark.parametrize(("versions", "expected"), [
    (["1.0.0"], "1.0.0"), (["0.3.0", "1.0.0"], "1.0.0"), (["1.0.0", "1.2.0", "2.0.0"], "1.2.0"),
    (["v1.5.0", "garbage"], "1.5.0"),
])
def test_highest_supported_version(versions: list[str], expected: str) -> None:
    assert str(highest_supported_version(versions)) == expected


@pytest.mark.parametrize(("versions", "error"), [
    ([], "empty array for supported versions"),
    (["0.3.0"], "highest supported version reported is 0.3.0, must be v1.x"),
    (["2.0.0", "3.1"], "could not find a highest supported version from versions ([2.0.0 3.1]) reported: <nil>"),
    (["x", "y"], 'could not find a highest supported version from versions ([x y]) reported: could not parse "x" as '
                 "version"),
])
def test_highest_supported_version_errors(versions: list[str], error: str) -> None:
    with pytest.raises(VersionError) as caught:
        highest_supported_version(versions)
    assert str(caught.value) == error


V1 = Version((1, 0, 0))


@pytest.mark.parametrize(("versions", "existing", "error"), [
    ([], None, 'kubernetes.io/csi: ValidatePlugin for CSI driver "d.csi" failed. Plugin returned an empty list for '
               "supported versions"),
    (["2.0.0"], None, 'kubernetes.io/csi: ValidatePlugin for CSI driver "d.csi" failed. None of the versions '
                      'specified ["2.0.0"] are supported. err=could not find a highest supported version from '
                      "versions ([2.0.0]) reported: <nil>"),
    (["0.2.0", "0.3.0"], None, 'kubernetes.io/csi: ValidatePlugin for CSI driver "d.csi" failed. None of the versions '
                               'specified ["0.2.0" "0.3.0"] are supported. err=highest supported version reported is '
                               "0.3.0, must be v1.x"),
    (["1.0.0"], Driver("/old", V1), 'kubernetes.io/csi: ValidatePlugin for CSI driver "d.csi" failed. Another driver '
                                    "with the same name is already registered with a higher supported version: "
                                    '"1.0.0"'),
    (["1.0.0"], Driver("/old", Version((1, 2))), 'kubernetes.io/csi: ValidatePlugin for CSI driver "d.csi" failed. '
                                                 "Another driver with the same name is already registered with a "
                                                 'higher supported version: "1.2"'),
])
def test_validate_versions_refusals(versions: list[str], existing: Driver | None, error: str) -> None:
    with pytest.raises(ValidationError) as caught:
        validate_versions("ValidatePlugin", "d.csi", versions, existing)
    assert str(caught.value) == error


def test_validate_versions_accepts_a_newer_version_of_a_registered_driver() -> None:
    assert validate_versions("RegisterPlugin", "d.csi", ["1.1.0"], Driver("/old", V1)) == Version((1, 1, 0))


# -------------------------------------------------------------------------------------- whole registrations

DRIVER = "hostpath.csi.k8s.io"


@pytest.fixture
def base() -> Iterator[str]:
    yield from short_tmpdir("csireg")


class Node:
    """One agent's CSI side as kopflet/node.py builds it, on `base`."""

    def __init__(self, base: str) -> None:
        self.registry = os.path.join(base, "plugins_registry")
        self.kube = FakeKube()

        async def no_wait(seconds: float) -> None:
            pass

        self.nim = NodeInfoManager(self.kube, self.kube.node_name, sleep=no_wait)  # type: ignore[arg-type]
        self.drivers = DriversStore()
        self.handler = RegistrationHandler(self.drivers, self.nim)
        self.manager = PluginManager(self.registry, period=0.05, dial_timeout=1.0)
        self.manager.add_handler(cache.CSI_PLUGIN, self.handler)


@pytest.fixture
async def node(base: str) -> AsyncIterator[Node]:
    agent = Node(base)
    task = asyncio.create_task(agent.manager.run())
    yield agent
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


@contextlib.asynccontextmanager
async def running(*servers: Any) -> AsyncIterator[None]:
    for server in servers:
        await server.start()
    try:
        yield
    finally:
        for server in reversed(servers):
            await server.stop()


async def _told(registrar: FakeRegistrar, count: int = 1) -> list[tuple[bool, str]]:
    async with asyncio.timeout(10):
        for _ in iter(lambda: len(registrar.statuses) >= count, True):
            await asyncio.sleep(0.02)
    return registrar.statuses


def _csi_driver(base: str, **kwargs: Any) -> FakeDriver:
    return FakeDriver(os.path.join(base, "plugins", "csi-hostpath", "csi.sock"), name=DRIVER, **kwargs)


def _registrar(node: Node, driver: FakeDriver, **kwargs: Any) -> FakeRegistrar:
    return FakeRegistrar(os.path.join(node.registry, f"{DRIVER}-reg.sock"), name=DRIVER, endpoint=driver.socket,
                         **kwargs)


async def test_a_driver_registers(base: str, node: Node) -> None:
    driver = _csi_driver(base, node_id="node-a", max_volumes=10, topology={"topology.hostpath.csi/node": "node-a"})
    registrar = _registrar(node, driver, versions=("1.0.0",))
    async with running(driver, registrar):
        assert await _told(registrar) == [(True, "")]
        assert node.drivers.get(DRIVER) == Driver(driver.socket, Version((1, 0, 0)))
        assert len(driver.calls("NodeGetInfo")) == 1
        meta = node.kube.node["metadata"]
        assert json.loads(meta["annotations"][ANNOTATION_KEY_NODE_ID]) == {DRIVER: "node-a"}
        assert meta["labels"] == {"topology.hostpath.csi/node": "node-a"}
        assert node.kube.csi_node is not None
        assert node.kube.csi_node["metadata"]["ownerReferences"][0] == {"apiVersion": "v1", "kind": "Node",
                                                                        "name": "node-a", "uid": "uid-a"}
        assert node.kube.csi_node["spec"]["drivers"] == [{
            "name": DRIVER, "nodeID": "node-a", "topologyKeys": ["topology.hostpath.csi/node"],
            "allocatable": {"count": 10}}]
        client = new_csi_driver_client(node.drivers, DRIVER)  # what volume operations will use
        async with client:
            assert (await client.get_plugin_info()).name == DRIVER
    # the registration socket is gone: the driver deregisters
    async with asyncio.timeout(10):
        for _ in iter(lambda: node.drivers.get(DRIVER) is None and node.manager.actual == {}, True):
            await asyncio.sleep(0.02)
    async with asyncio.timeout(10):
        for _ in iter(lambda: node.kube.csi_node is not None and node.kube.csi_node["spec"]["drivers"] == [], True):
            await asyncio.sleep(0.02)
    assert ANNOTATION_KEY_NODE_ID not in node.kube.node["metadata"]["annotations"]


VALIDATION = 'RegisterPlugin error -- plugin validation failed with err: validation failed for CSI Driver ' \
             f'{DRIVER} at endpoint {{endpoint}}: kubernetes.io/csi: ValidatePlugin for CSI driver "{DRIVER}" failed.'


@pytest.mark.parametrize(("versions", "told"), [
    pytest.param((), VALIDATION + " Plugin returned an empty list for supported versions", id="no versions"),
    pytest.param(("2.0.0",), VALIDATION + ' None of the versions specified ["2.0.0"] are supported. err=could not '
                 "find a highest supported version from versions ([2.0.0]) reported: <nil>", id="only 2.x"),
    pytest.param(("0.3.0",), VALIDATION + ' None of the versions specified ["0.3.0"] are supported. '
                 "err=highest supported version reported is 0.3.0, must be v1.x", id="only 0.x"),
])
async def test_validation_failures_are_told(base: str, node: Node, versions: tuple[str, ...], told: str) -> None:
    driver = _csi_driver(base)
    registrar = _registrar(node, driver, versions=versions)
    async with running(driver, registrar):
        [status] = await _told(registrar)
    assert status == (False, told.format(endpoint=driver.socket))
    assert driver.requests == [] and node.drivers.list() == [] and node.kube.calls == []


async def test_a_second_socket_for_a_registered_driver_is_refused(base: str, node: Node) -> None:
    driver = _csi_driver(base)
    first = _registrar(node, driver)
    second = FakeRegistrar(os.path.join(node.registry, "again-reg.sock"), name=DRIVER, endpoint="/other/csi.sock")
    async with running(driver, first):
        assert await _told(first) == [(True, "")]
        async with running(second):
            [status] = await _told(second)
    assert status == (False, VALIDATION.format(endpoint="/other/csi.sock") + " Another driver with the same name is "
                      'already registered with a higher supported version: "1.0.0"')


async def test_node_get_info_failure_is_told_and_undone(base: str, node: Node) -> None:
    driver = _csi_driver(base)
    driver.fail["NodeGetInfo"] = (grpc.StatusCode.UNAVAILABLE, "driver not ready")
    registrar = _registrar(node, driver)
    async with running(driver, registrar):
        [status] = await _told(registrar)
        assert status == (False, "RegisterPlugin error -- plugin registration failed with err: rpc error: "
                                 "code = Unavailable desc = driver not ready")
        assert node.drivers.list() == [] and node.manager.actual == {}
        driver.fail.clear()  # ready now: the next try (after the backoff) registers it
        assert (await _told(registrar, 2))[1] == (True, "")


async def test_an_empty_node_id_is_told(base: str, node: Node) -> None:
    driver = _csi_driver(base, node_id="")
    registrar = _registrar(node, driver)
    async with running(driver, registrar):
        [status] = await _told(registrar)
    assert status == (False, "RegisterPlugin error -- plugin registration failed with err: error adding CSI driver "
                             "node info: driverNodeID must not be empty")
    assert node.drivers.list() == []


async def test_a_topology_collision_is_told(base: str, node: Node) -> None:
    node.kube.node["metadata"]["labels"] = {"topology.hostpath.csi/node": "someone-else"}
    driver = _csi_driver(base, topology={"topology.hostpath.csi/node": "node-a"})
    registrar = _registrar(node, driver)
    async with running(driver, registrar):
        [status] = await _told(registrar)
    collision = ('detected topology value collision: driver reported "topology.hostpath.csi/node":"node-a" but '
                 'existing label is "topology.hostpath.csi/node":"someone-else"')
    assert status == (False, "RegisterPlugin error -- plugin registration failed with err: error updating Node object "
                             "with CSI driver node info: error updating node: timed out waiting for the condition; "
                             f"caused by: {collision}")


def test_a_client_for_an_unknown_driver_is_upstreams_error() -> None:
    with pytest.raises(RegistrationError, match=r"^driver name is empty$"):
        new_csi_driver_client(DriversStore(), "")
    with pytest.raises(RegistrationError, match=r"^driver name x\.csi not found in the list of registered CSI "
                                                r"drivers$"):
        new_csi_driver_client(DriversStore(), "x.csi")
