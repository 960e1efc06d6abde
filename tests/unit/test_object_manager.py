"""kopflet.util.manager: the ConfigMaps and Secrets pods reference, read from a watch of each (upstream's watch-based
manager) against a fake apiserver that answers WatchLists: one watch per object however many pods hold it, stopped
when the last lets go (or the pod's reference is dropped), reads answered from the watch (None for a missing object,
its later creation and changes seen), an immutable object's watch stopped at its first read, an idle watch stopped
and started again by the next read, a watch that never answers a CacheSyncError after the wait; which names a pod
references; the Get strategy's GETs."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from kopflet.api.spec import Pod, pod_from_body
from kopflet.client.informer import INITIAL_EVENTS_END
from kopflet.client.kubeapi import API_ERRORS, Credentials, KubeApiError, KubeClient
from kopflet.util.manager import CacheSyncError, DirectObjects, ObjectCache, PodObjects
from kopflet.volumes import plugins


class FakeApi:
    """Objects by (collection path, name); each WatchList answers its one object (field selector metadata.name) and
    then the changes `change` queues for it; `silent` paths never answer."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.queues: dict[tuple[str, str], asyncio.Queue[dict[str, Any]]] = {}
        self.watches: list[tuple[str, str]] = []
        self.open: set[tuple[str, str]] = set()
        self.gets: list[str] = []
        self.silent: set[str] = set()
        self.refused: set[str] = set()  # paths this identity may not watch (a role granting get only)
        self.timeouts: list[int] = []  # each watch's timeoutSeconds
        self.version = 10

    async def watch(self, path: str, resource_version: str, *, timeout_seconds: int = 300,
                    params: Mapping[str, str] | None = None) -> AsyncIterator[dict[str, Any]]:
        assert params is not None and params["sendInitialEvents"] == "true", params
        name = params["fieldSelector"].removeprefix("metadata.name=")
        key = (path, name)
        self.watches.append(key)
        self.timeouts.append(timeout_seconds)
        self.open.add(key)
        queue = self.queues.setdefault(key, asyncio.Queue())
        try:
            if path in self.refused:
                raise KubeApiError(403, "Forbidden", f'cannot watch resource "{path.rsplit("/", 1)[1]}"', "WATCH", path)
            if path in self.silent:
                await asyncio.sleep(3600)
            if key in self.objects:
                yield {"type": "ADDED", "object": copy.deepcopy(self.objects[key])}
            yield {"type": "BOOKMARK", "object": {"metadata": {
                "resourceVersion": str(self.version), "annotations": {INITIAL_EVENTS_END: "true"}}}}
            while True:
                yield await queue.get()
        finally:
            self.open.discard(key)

    def change(self, path: str, name: str, body: dict[str, Any] | None, namespace: str = "shop") -> None:
        """The object made, changed or (None) deleted; its event queued for a watch of it."""
        self.version += 1
        key = (path, name)
        old = self.objects.get(key)
        if body is None:
            del self.objects[key]
            event = {"type": "DELETED", "object": old}
        else:
            obj = {"metadata": {"name": name, "namespace": namespace, "resourceVersion": str(self.version)},
                   "managedFields": [{"manager": "kubectl"}], **body}
            self.objects[key] = obj
            event = {"type": "MODIFIED" if old is not None else "ADDED", "object": copy.deepcopy(obj)}
        self.queues.setdefault(key, asyncio.Queue()).put_nowait(event)

    async def get_config_map(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.gets.append(f"configmaps/{name}")
        return self.objects.get((CM, name))

    async def get_secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.gets.append(f"secrets/{name}")
        return self.objects.get((SECRETS, name))


CM = "/api/v1/namespaces/shop/configmaps"
SECRETS = "/api/v1/namespaces/shop/secrets"


def make_pod(uid: str = "uid-1", *, volumes: list[dict[str, Any]] | None = None,
             env: list[dict[str, Any]] | None = None, **spec: Any) -> Pod:
    return pod_from_body({"metadata": {"name": f"web-{uid}", "namespace": "shop", "uid": uid}, "spec": {
        "containers": [{"name": "app", "image": "busybox", "env": env or []}],
        "volumes": volumes if volumes is not None else [
            {"name": "access", "projected": {"sources": [{"configMap": {"name": "kube-root-ca.crt"}}]}}],
        **spec}})


async def settle() -> None:
    for _ in range(50):
        await asyncio.sleep(0)


@pytest.fixture
async def objects() -> AsyncIterator[tuple[PodObjects, FakeApi]]:
    api = FakeApi()
    managed = PodObjects(api, plugins.object_names)  # type: ignore[arg-type]
    yield managed, api
    await managed.close()


# ------------------------------------------------------------------------------------------------- which names

@pytest.mark.parametrize(("spec", "config_maps", "secrets"), [
    ({"volumes": [{"name": "a", "configMap": {"name": "cm-vol"}}, {"name": "b", "secret": {"secretName": "s-vol"}}]},
     {"cm-vol"}, {"s-vol"}),
    ({"volumes": [{"name": "p", "projected": {"sources": [{"configMap": {"name": "cm-p"}},
                                                          {"secret": {"name": "s-p"}}]}}]},
     {"cm-p"}, {"s-p"}),
    ({"volumes": [], "env": [{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "cm-env", "key": "k"}}},
                             {"name": "B", "valueFrom": {"secretKeyRef": {"name": "s-env", "key": "k"}}}]},
     {"cm-env"}, {"s-env"}),
    ({"volumes": [], "imagePullSecrets": [{"name": "regcred"}, {"name": ""}]}, set(), {"regcred"}),
    ({"volumes": []}, set(), set()),
], ids=["volumes", "projected", "env", "pull-secrets", "none"])
def test_the_names_a_pod_references(spec: dict[str, Any], config_maps: set[str], secrets: set[str]) -> None:
    assert plugins.object_names(make_pod(**spec)) == (config_maps, secrets)


def test_env_from_and_init_and_ephemeral_containers_count_too() -> None:
    pod = pod_from_body({"metadata": {"name": "p", "namespace": "shop", "uid": "u"}, "spec": {
        "initContainers": [{"name": "init", "image": "busybox", "envFrom": [{"configMapRef": {"name": "cm-init"}}]}],
        "containers": [{"name": "app", "image": "busybox", "envFrom": [{"secretRef": {"name": "s-app"}}]}],
        "ephemeralContainers": [{"name": "debug", "image": "busybox", "env": [
            {"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cm-debug", "key": "k"}}}]}]}})
    assert plugins.object_names(pod) == ({"cm-init", "cm-debug"}, {"s-app"})


# ------------------------------------------------------------------------------------------------- the watches

async def test_pods_share_one_watch_per_object_until_the_last_lets_go(objects: tuple[PodObjects, FakeApi]) -> None:
    managed, api = objects
    api.change(CM, "kube-root-ca.crt", {"data": {"ca.crt": "CA"}})
    first, second = make_pod("uid-1"), make_pod("uid-2")
    assert await managed.config_map(first, "kube-root-ca.crt") == {"data": {"ca.crt": "CA"}}  # trimmed
    assert await managed.config_map(second, "kube-root-ca.crt") == {"data": {"ca.crt": "CA"}}
    assert await managed.config_map(first, "kube-root-ca.crt") == {"data": {"ca.crt": "CA"}}
    assert api.watches == [(CM, "kube-root-ca.crt")] and api.gets == []  # one watch, no GET
    managed.unregister("uid-1")
    await settle()
    assert api.open == {(CM, "kube-root-ca.crt")}
    managed.unregister("uid-2")
    managed.unregister("uid-2")  # idempotent
    await settle()
    assert api.open == set() and not managed.config_maps.registered("shop", "kube-root-ca.crt")


async def test_a_read_sees_changes_and_a_missing_object_once_it_is_made(objects: tuple[PodObjects, FakeApi]) -> None:
    managed, api = objects
    pod = make_pod(volumes=[{"name": "c", "configMap": {"name": "conf", "optional": True}},
                            {"name": "s", "secret": {"secretName": "creds"}}])
    assert await managed.config_map(pod, "conf") is None
    assert await managed.secret(pod, "creds") is None
    api.change(CM, "conf", {"data": {"k": "v1"}})
    api.change(SECRETS, "creds", {"type": "Opaque", "data": {"p": "cw=="}})
    await settle()
    assert await managed.config_map(pod, "conf") == {"data": {"k": "v1"}}
    assert await managed.secret(pod, "creds") == {"type": "Opaque", "data": {"p": "cw=="}}
    api.change(CM, "conf", {"data": {"k": "v2"}})
    api.change(SECRETS, "creds", None)
    await settle()
    assert await managed.config_map(pod, "conf") == {"data": {"k": "v2"}}
    assert await managed.secret(pod, "creds") is None
    assert len(api.watches) == 2 and api.gets == []


async def test_a_dropped_reference_stops_its_watch(objects: tuple[PodObjects, FakeApi]) -> None:
    managed, api = objects
    pod = make_pod(volumes=[{"name": "a", "configMap": {"name": "a"}}, {"name": "b", "configMap": {"name": "b"}}])
    managed.register(pod)
    await settle()
    assert api.open == {(CM, "a"), (CM, "b")}
    managed.register(make_pod(volumes=[{"name": "a", "configMap": {"name": "a"}}]))  # the same UID, b dropped
    await settle()
    assert api.open == {(CM, "a")}


async def test_an_immutable_objects_watch_stops_at_its_first_read(objects: tuple[PodObjects, FakeApi]) -> None:
    managed, api = objects
    api.change(CM, "kube-root-ca.crt", {"data": {"ca.crt": "CA"}, "immutable": True})
    pod = make_pod()
    assert await managed.config_map(pod, "kube-root-ca.crt") == {"data": {"ca.crt": "CA"}, "immutable": True}
    await settle()
    assert api.open == set()
    assert await managed.config_map(pod, "kube-root-ca.crt") == {"data": {"ca.crt": "CA"}, "immutable": True}
    assert api.watches == [(CM, "kube-root-ca.crt")]  # answered from the cache, not watched again


async def test_an_idle_watch_is_stopped_and_the_next_read_starts_it_again() -> None:
    api, now = FakeApi(), [1000.0]
    managed = PodObjects(api, plugins.object_names, sync_frequency=60.0,  # type: ignore[arg-type]
                         clock=lambda: now[0])
    try:
        api.change(CM, "kube-root-ca.crt", {"data": {"ca.crt": "CA"}})
        pod = make_pod()
        await managed.config_map(pod, "kube-root-ca.crt")
        now[0] += 299  # five sync periods: not yet
        assert managed.config_maps.recycle_idle() == 0
        now[0] += 2
        assert managed.config_maps.recycle_idle() == 1
        await settle()
        assert api.open == set()
        api.change(CM, "kube-root-ca.crt", {"data": {"ca.crt": "CA2"}})  # missed while stopped
        assert await managed.config_map(pod, "kube-root-ca.crt") == {"data": {"ca.crt": "CA2"}}
        assert api.watches == [(CM, "kube-root-ca.crt")] * 2
    finally:
        await managed.close()


async def test_a_watch_that_never_answers_is_a_cache_sync_error() -> None:
    api = FakeApi()
    api.silent.add(CM)
    cache = ObjectCache(api, "configmaps", lambda ns: CM, api.get_config_map,  # type: ignore[arg-type]
                        sync_timeout=0.05)
    try:
        cache.add_reference("shop", "conf", "uid-1")
        with pytest.raises(CacheSyncError) as info:
            await cache.get("shop", "conf")
        assert str(info.value) == "failed to sync configmap cache: timed out waiting for the condition"
        assert isinstance(info.value, API_ERRORS)  # a sync's retry, as an apiserver that does not answer
        with pytest.raises(LookupError, match='object "shop"/"other" not registered'):
            await cache.get("shop", "other")
    finally:
        await cache.close()


async def test_a_read_the_spec_does_not_show_is_held_for_the_pod(objects: tuple[PodObjects, FakeApi]) -> None:
    managed, api = objects
    api.change(SECRETS, "extra", {"data": {}})
    pod, other = make_pod("uid-1"), make_pod("uid-2")
    assert await managed.secret(other, "extra") == {"data": {}}  # another pod holds it first
    assert await managed.secret(pod, "extra") == {"data": {}}
    managed.unregister(other.uid)
    assert managed.secrets.registered("shop", "extra")  # this pod holds its own reference
    managed.register(make_pod("uid-1"))  # its next sync's spec (a new object): the extra name stays
    await settle()
    assert managed.secrets.registered("shop", "extra")
    assert [w for w in api.watches if w[0] == SECRETS] == [(SECRETS, "extra")]  # never stopped and watched again
    managed.unregister(pod.uid)
    assert not managed.secrets.registered("shop", "extra")


async def test_pods_without_a_worker_are_let_go_of(objects: tuple[PodObjects, FakeApi]) -> None:
    managed, _ = objects
    managed.register(make_pod("uid-1"))
    managed.register(make_pod("uid-2"))
    managed.retain({"uid-2"})
    assert managed.registered_pods() == {"uid-2"}
    assert managed.config_maps.registered("shop", "kube-root-ca.crt")


async def test_after_close_no_watch_starts_and_reads_fail_at_once(objects: tuple[PodObjects, FakeApi]) -> None:
    managed, api = objects
    managed.register(make_pod("uid-1"))
    await settle()
    await managed.close()
    assert api.open == set()
    with pytest.raises(CacheSyncError, match="the configmap manager is stopped"):
        await asyncio.wait_for(managed.config_map(make_pod("uid-2"), "kube-root-ca.crt"), 1.0)
    assert len(api.watches) == 1


async def test_a_read_waiting_for_a_watch_stopped_meanwhile_ends_at_once(objects: tuple[PodObjects, FakeApi]) -> None:
    managed, api = objects
    api.silent.add(CM)
    pod = make_pod()
    reading = asyncio.create_task(managed.config_map(pod, "kube-root-ca.crt"))
    await settle()
    managed.unregister(pod.uid)  # the pod's teardown while its sync still reads
    with pytest.raises(CacheSyncError, match="timed out waiting for the condition"):
        await asyncio.wait_for(reading, 1.0)  # not the 30 s sync timeout


async def test_an_identity_refused_the_watch_reads_with_a_get(objects: tuple[PodObjects, FakeApi],
                                                              caplog: pytest.LogCaptureFixture) -> None:
    managed, api = objects
    api.refused.add(CM)
    api.change(CM, "kube-root-ca.crt", {"data": {"ca.crt": "CA"}})
    first, second = make_pod("uid-1"), make_pod("uid-2")
    assert await asyncio.wait_for(managed.config_map(first, "kube-root-ca.crt"), 1.0) == {"data": {"ca.crt": "CA"}}
    api.change(CM, "kube-root-ca.crt", {"data": {"ca.crt": "CA2"}})
    assert await managed.config_map(second, "kube-root-ca.crt") == {"data": {"ca.crt": "CA2"}}
    await settle()
    assert api.gets == ["configmaps/kube-root-ca.crt"] * 2 and api.watches == [(CM, "kube-root-ca.crt")]
    assert api.open == set()  # not watched again: every read is a GET
    assert caplog.text.count("cannot watch configmaps") == 1
    assert "configMapAndSecretChangeDetectionStrategy: Get" in caplog.text


async def test_the_get_strategy_reads_with_a_get_each_time() -> None:
    api = FakeApi()
    api.change(CM, "conf", {"data": {"k": "v"}})
    direct = DirectObjects(api)  # type: ignore[arg-type]
    pod = make_pod()
    assert (await direct.config_map(pod, "conf"))["data"] == {"k": "v"}  # type: ignore[index]
    assert await direct.config_map(pod, "conf") is not None
    assert await direct.secret(pod, "creds") is None
    direct.unregister(pod.uid)
    assert api.gets == ["configmaps/conf", "configmaps/conf", "secrets/creds"] and api.watches == []


# ------------------------------------------------------------------------------------------- the client's pools

async def test_watches_have_a_pool_of_their_own_renewed_with_the_requests() -> None:
    """A watch per object pods reference holds its connection for minutes: never one of the requests' 32."""
    client = KubeClient(Credentials(server="https://127.0.0.1:1", insecure=True))
    await client.open()
    try:
        requests, watches = client._session, client._watches
        assert requests is not None and watches is not None and requests is not watches
        assert requests.connector.limit == 32 and watches.connector.limit == 0  # type: ignore[union-attr]
        await client.renew_connections()
        assert client._session is not requests and client._watches is not watches
        assert requests.closed and watches.closed
    finally:
        await client.close()
    assert client._session is None and client._watches is None


async def test_each_objects_watch_lasts_30_to_60_minutes(objects: tuple[PodObjects, FakeApi]) -> None:
    # upstream NewWatchBasedManager: MinWatchTimeout 30 minutes (client-go's reflector picks 1 to 2 times it)
    managed, api = objects
    for uid in ("uid-1", "uid-2"):
        managed.register(make_pod(uid, volumes=[{"name": "v", "configMap": {"name": f"cm-{uid}"}}]))
    await settle()
    assert len(api.timeouts) == 2 and all(1800 <= t < 3600 for t in api.timeouts)
