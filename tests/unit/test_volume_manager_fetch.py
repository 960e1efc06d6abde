"""kopflet.volumes.manager's reads of a pod's volume sources: the ConfigMaps, Secrets and service account tokens are
asked for at once (not one round trip after another), a failure is reported as the first source in the old order
(ConfigMaps, Secrets, tokens), and two projected tokens of the same audience and lifetime are one TokenRequest.
Against a fake apiserver; the files are written under `tmp_path`."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from kopflet.api.spec import Pod, pod_from_body
from kopflet.client.kubeapi import KubeApiError
from kopflet.config.settings import AgentConfig
from kopflet.paths import Layout
from kopflet.util.manager import CacheSyncError, NotRegisteredError
from kopflet.volumes import manager


class FakeApi:
    """Each read waits until `together` reads are in flight (or gives up after a second, so reads made one after
    another fail the test instead of hanging it); `errors` by ConfigMap/Secret name or "token"."""

    def __init__(self, together: int, errors: dict[str, tuple[float, Exception]] | None = None) -> None:
        self.together, self.errors = together, errors or {}
        self.in_flight = 0
        self.all_in_flight = asyncio.Event()
        self.calls: list[str] = []

    async def _arrive(self, what: str) -> None:
        self.calls.append(what)
        self.in_flight += 1
        if self.in_flight >= self.together:
            self.all_in_flight.set()
        try:
            await asyncio.wait_for(self.all_in_flight.wait(), 1.0)
        except TimeoutError:
            raise AssertionError(f"{what} was read alone: the other sources waited for it") from None
        if what in self.errors:
            delay, error = self.errors[what]
            await asyncio.sleep(delay)
            raise error

    async def get_config_map(self, namespace: str, name: str) -> dict[str, Any]:
        await self._arrive(name)
        return {"data": {"ca.crt": "CA"}}

    async def get_secret(self, namespace: str, name: str) -> dict[str, Any]:
        await self._arrive(name)
        return {"data": {"password": "czNjcmV0"}}

    async def request(self, method: str, path: str, **_: Any) -> dict[str, Any]:
        assert method == "POST" and path.endswith("/serviceaccounts/default/token"), (method, path)
        await self._arrive("token")
        return {"status": {"token": "TOKEN", "expirationTimestamp": "2999-01-01T00:00:00Z"}}


def make_pod(*, tokens: int = 1) -> Pod:
    sources: list[dict[str, Any]] = [{"configMap": {"name": "kube-root-ca.crt"}}]
    sources += [{"serviceAccountToken": {"path": f"token-{i}", "audience": "api"}} for i in range(tokens)]
    return pod_from_body({"metadata": {"name": "web", "namespace": "shop", "uid": "uid-1"}, "spec": {
        "containers": [{"name": "app", "image": "busybox", "volumeMounts": [
            {"name": "access", "mountPath": "/access"}, {"name": "creds", "mountPath": "/creds"}]}],
        "volumes": [{"name": "access", "projected": {"sources": sources}},
                    {"name": "creds", "secret": {"secretName": "db"}}]}})


@pytest.fixture(autouse=True)
def no_tmpfs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Secret and projected volumes are tmpfs mounts on a node: plain directories here."""
    monkeypatch.setattr(manager, "mount_tmpfs", lambda path, size_limit: None)


def volume_manager(tmp_path: Path, api: FakeApi) -> manager.VolumeManager:
    return manager.VolumeManager(AgentConfig(node_name="node-a"), api,  # type: ignore[arg-type]
                                 layout=Layout(str(tmp_path / "root")))


async def test_the_sources_are_read_at_once(tmp_path: Path) -> None:
    api = FakeApi(together=3)
    plans = await volume_manager(tmp_path, api).setup(make_pod())
    assert sorted(api.calls) == ["db", "kube-root-ca.crt", "token"]
    access = Path(plans["access"].host_path)
    assert (access / "ca.crt").read_bytes() == b"CA" and (access / "token-0").read_text() == "TOKEN"
    assert (Path(plans["creds"].host_path) / "password").read_bytes() == b"s3cret"


async def test_the_first_source_in_order_names_the_failure(tmp_path: Path) -> None:
    # The token fails first in time, the ConfigMap later: the ConfigMap's error is the one raised, as when the
    # ConfigMaps were read before the tokens.
    cm_error = aiohttp.ClientConnectionError("configmap read failed: connection reset")
    token_error = KubeApiError(500, "InternalError", "token request failed", "POST", "/token")
    api = FakeApi(together=3, errors={"kube-root-ca.crt": (0.05, cm_error), "token": (0.0, token_error)})
    with pytest.raises(aiohttp.ClientConnectionError) as raised:
        await volume_manager(tmp_path, api).setup(make_pod())
    assert raised.value is cm_error


async def test_the_same_token_twice_is_one_request(tmp_path: Path) -> None:
    api = FakeApi(together=3)
    plans = await volume_manager(tmp_path, api).setup(make_pod(tokens=2))
    assert api.calls.count("token") == 1
    access = Path(plans["access"].host_path)
    assert (access / "token-0").read_text() == (access / "token-1").read_text() == "TOKEN"


async def test_a_failed_token_request_is_the_volume_error(tmp_path: Path) -> None:
    error = KubeApiError(403, "Forbidden", "serviceaccounts \"default\" is forbidden", "POST", "/token")
    api = FakeApi(together=3, errors={"token": (0.0, error)})
    with pytest.raises(manager.VolumeError, match='volume "access" : failed to fetch token: '):
        await volume_manager(tmp_path, api).setup(make_pod())


@pytest.mark.parametrize(("error", "detail"), [
    (CacheSyncError("failed to sync configmap cache: timed out waiting for the condition"),
     "failed to sync configmap cache: timed out waiting for the condition"),
    (NotRegisteredError('object "shop"/"kube-root-ca.crt" not registered'),
     'object "shop"/"kube-root-ca.crt" not registered'),
    (KubeApiError(403, "Forbidden", 'configmaps "kube-root-ca.crt" is forbidden: no relationship found', "GET",
                  "/cm"), 'configmaps "kube-root-ca.crt" is forbidden: no relationship found'),
])
async def test_a_failed_object_read_is_the_volumes_mount_failure(tmp_path: Path, error: Exception,
                                                                  detail: str) -> None:
    # upstream: getConfigMap's error fails that volume's SetUp (a FailedMount naming it), not the pod's sync
    api = FakeApi(together=3, errors={"kube-root-ca.crt": (0.0, error)})
    with pytest.raises(manager.VolumeError) as raised:
        await volume_manager(tmp_path, api).setup(make_pod())
    assert str(raised.value) == f'MountVolume.SetUp failed for volume "access" : {detail}'


async def test_no_answer_from_the_apiserver_is_still_the_syncs_failure(tmp_path: Path) -> None:
    error = aiohttp.ClientConnectionError("connection refused")
    api = FakeApi(together=3, errors={"db": (0.0, error)})
    with pytest.raises(aiohttp.ClientConnectionError):
        await volume_manager(tmp_path, api).setup(make_pod())
