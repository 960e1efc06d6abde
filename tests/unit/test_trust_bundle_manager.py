"""kopflet.volumes.trust_bundle_manager (upstream's LazyInformerManager over InformerManager) against a fake apiserver:
the version chosen by discovery at the first need and kept, upstream's errors (not supported, discovery failed, not
yet synced), the cache kept by the watch (ADDED, MODIFIED, DELETED, a relist after 410 Gone), the pods woken when a
bundle they read changes, and the VolumeManager's use of it (the projected file follows the bundle)."""

from __future__ import annotations

import asyncio
import base64
import copy
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from kopflet.api.spec import Pod, pod_from_body
from kopflet.client.kubeapi import KubeApiError
from kopflet.config.settings import AgentConfig
from kopflet.paths import Layout
from kopflet.volumes import manager, plugins
from kopflet.volumes import trust_bundles as ctb
from kopflet.volumes.plugins import FileEntry, VolumeError
from kopflet.volumes.trust_bundle_manager import ClusterTrustBundleManager
from kopflet.volumes.trust_bundles import Bundles, ClusterTrustBundle

SEED = b"fixed seed"
WITH_BUNDLES = {"kind": "APIResourceList", "resources": [{"name": "certificatesigningrequests"},
                                                          {"name": "clustertrustbundles"}]}
WITHOUT_BUNDLES = {"kind": "APIResourceList", "resources": [{"name": "certificatesigningrequests"}]}


def pem(data: bytes) -> str:
    text = base64.b64encode(data).decode()
    return f"-----BEGIN CERTIFICATE-----\n{text}\n-----END CERTIFICATE-----\n"


def obj(name: str, signer: str = "", trust: bytes = b"root", **labels: str) -> dict[str, Any]:
    body: dict[str, Any] = {"trustBundle": pem(trust)}
    if signer:
        body["signerName"] = signer
    return {"metadata": {"name": name, "labels": labels}, "spec": body}


class FakeApi:
    """The apiserver as the manager sees it: discovery documents by version (missing: 404), and the
    ClusterTrustBundles of the version served, listed and watched (events queued, or an exception a watch raises)."""

    def __init__(self, discovery: Mapping[str, dict[str, Any] | BaseException] | None = None) -> None:
        self.discovery = dict(discovery if discovery is not None else {"v1": WITH_BUNDLES})
        self.bundles: dict[str, dict[str, Any]] = {}
        self.version = 10
        self.events: asyncio.Queue[Any] = asyncio.Queue()
        self.calls: list[str] = []
        self.list_errors: list[BaseException] = []

    async def request(self, method: str, path: str, **_: Any) -> dict[str, Any]:
        assert method == "GET"
        self.calls.append(path)
        if path.endswith("/clustertrustbundles"):
            if self.list_errors:
                raise self.list_errors.pop(0)
            return {"metadata": {"resourceVersion": str(self.version)},
                    "items": [copy.deepcopy(b) for b in self.bundles.values()]}
        answer = self.discovery.get(path.rsplit("/", 1)[1])
        if answer is None:
            raise KubeApiError(404, "NotFound", "the server could not find the requested resource", method, path)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    async def watch(self, path: str, resource_version: str, *, timeout_seconds: int = 300,
                    params: Mapping[str, str] | None = None) -> AsyncIterator[dict[str, Any]]:
        self.calls.append(f"WATCH {path}?resourceVersion={resource_version}")
        while True:
            item = await self.events.get()
            if isinstance(item, BaseException):
                raise item
            yield item

    def put(self, kind: str, body: dict[str, Any], *, emit: bool = True) -> None:
        self.version += 1
        body = copy.deepcopy(body)
        body["metadata"]["resourceVersion"] = str(self.version)
        if kind == "DELETED":
            self.bundles.pop(body["metadata"]["name"], None)
        else:
            self.bundles[body["metadata"]["name"]] = body
        if emit:
            self.events.put_nowait({"type": kind, "object": copy.deepcopy(body)})


def make_pod(uid: str, *sources: dict[str, Any]) -> Pod:
    volumes = [{"name": "ctb", "projected": {"sources": [{"clusterTrustBundle": s} for s in sources]}}]
    return pod_from_body({"metadata": {"name": f"pod-{uid}", "namespace": "ns", "uid": uid},
                          "spec": {"volumes": volumes, "containers": [{"name": "app", "image": "agnhost"}]}})


class Harness:
    def __init__(self, api: FakeApi | None = None, *, sync_wait: float = 0.5) -> None:
        self.api = api if api is not None else FakeApi()
        self.woken: list[set[str]] = []
        self.manager = ClusterTrustBundleManager(self.api, wake=self.woken.append,  # type: ignore[arg-type]
                                                 sync_wait=sync_wait, order_seed=SEED, retry_min=0.01)
        self.task = asyncio.create_task(self.manager.run())

    async def stop(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)

    async def settle(self, seconds: float = 0.02) -> None:
        for _ in range(100):
            await asyncio.sleep(0)
        await asyncio.sleep(seconds)

    async def until(self, condition: Any, within: float = 5.0) -> None:
        """Until `condition()` holds (the informer's pauses are real, if short)."""
        deadline = asyncio.get_running_loop().time() + within
        while not condition():
            assert asyncio.get_running_loop().time() < deadline, "timed out"
            await asyncio.sleep(0.01)

    def woken_uids(self) -> set[str]:
        return set().union(*self.woken) if self.woken else set()


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    h = Harness()
    yield h
    await h.stop()


def names(bundles: Bundles) -> dict[str, str]:
    return {b.name: b.trust_bundle for b in bundles.items}


# ------------------------------------------------------------------------------------- choosing the version


@pytest.mark.parametrize(("discovery", "chosen", "asked"), [
    ({"v1": WITH_BUNDLES, "v1beta1": WITH_BUNDLES}, "v1", ["v1"]),
    ({"v1beta1": WITH_BUNDLES, "v1alpha1": WITH_BUNDLES}, "v1beta1", ["v1", "v1beta1"]),
    ({"v1": WITHOUT_BUNDLES, "v1alpha1": WITH_BUNDLES}, "v1alpha1", ["v1", "v1beta1", "v1alpha1"]),
])
async def test_the_first_version_served_is_used_from_then_on(discovery: dict[str, Any], chosen: str,
                                                             asked: list[str]) -> None:
    h = Harness(FakeApi(discovery))
    h.api.put("ADDED", obj("a", "s/a"), emit=False)
    got = await h.manager.bundles()
    assert not got.error and names(got) == {"a": pem(b"root")} and got.order_seed == SEED
    assert h.manager.version == chosen
    list_path = f"/apis/certificates.k8s.io/{chosen}/clustertrustbundles"
    assert h.api.calls[:len(asked) + 1] == [f"/apis/certificates.k8s.io/{v}" for v in asked] + [list_path]
    calls = len(h.api.calls)
    assert await h.manager.bundles() == got  # from the cache: nothing asked
    assert len(h.api.calls) == calls
    await h.stop()


async def test_no_version_served_is_upstreams_noop_manager_for_good() -> None:
    h = Harness(FakeApi({"v1": WITHOUT_BUNDLES}))
    assert await h.manager.bundles() == Bundles(error=ctb.NOT_SUPPORTED)
    assert h.api.calls == [f"/apis/certificates.k8s.io/{v}" for v in ("v1", "v1beta1", "v1alpha1")]
    h.api.discovery["v1"] = WITH_BUNDLES
    assert await h.manager.bundles() == Bundles(error=ctb.NOT_SUPPORTED)
    assert len(h.api.calls) == 3 and h.manager.version == ""
    await h.settle()
    assert len(h.api.calls) == 3  # no informer
    await h.stop()


FORBIDDEN = 'forbidden: User "x" cannot get path "/apis/certificates.k8s.io/v1"'


@pytest.mark.parametrize(("failure", "cause"), [
    (KubeApiError(403, "Forbidden", FORBIDDEN, "GET", "/apis/certificates.k8s.io/v1"), FORBIDDEN),
    (KubeApiError(503, "ServiceUnavailable", "the server is currently unable to handle the request", "GET", "/x"),
     "the server is currently unable to handle the request"),
    (ConnectionRefusedError("connection refused"), "connection refused"),
    (TimeoutError(), "TimeoutError"),
], ids=["403", "503", "refused", "timeout"])
async def test_a_failed_discovery_is_upstreams_error_and_asked_again(failure: BaseException, cause: str) -> None:
    h = Harness(FakeApi({"v1": failure}))
    assert await h.manager.bundles() == Bundles(error=ctb.DISCOVERY_FAILED + cause)
    assert h.manager.version is None
    assert (await h.manager.bundles()).error.startswith(
        "failed to ensure informer manager for ClusterTrustBundles: failed to determine which informer manager to "
        "choose: ")
    assert h.api.calls == ["/apis/certificates.k8s.io/v1"] * 2  # not the next versions: upstream returns at once
    h.api.discovery["v1"] = WITH_BUNDLES
    assert not (await h.manager.bundles()).error
    await h.stop()


async def test_a_hung_discovery_is_cut_off() -> None:
    class Hung(FakeApi):
        async def request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
            if not path.endswith("/clustertrustbundles"):
                await asyncio.sleep(3600)
            return await super().request(method, path, **kwargs)

    api = Hung()
    got = await ClusterTrustBundleManager(api, call_timeout=0.01).bundles()  # type: ignore[arg-type]
    assert got == Bundles(error=ctb.DISCOVERY_FAILED + "TimeoutError")


# ------------------------------------------------------------------------------------------- not yet synced


async def test_not_synced_until_the_first_list_then_the_waiting_pods_are_woken() -> None:
    h = Harness(sync_wait=0.05)
    # five refusals: the informer's backoff (0.01 ... 0.16 s, 0.31 s in all) well past the 0.05 s wait, so a loaded
    # machine's late timer cannot let the first list land inside it
    h.api.list_errors = [KubeApiError(403, "Forbidden", "cannot list clustertrustbundles", "GET", "/x")] * 5
    h.api.put("ADDED", obj("a"), emit=False)
    pod = make_pod("u1", {"name": "missing", "optional": True, "path": "a.pem"})
    got = await h.manager.for_pod(pod)
    assert got == Bundles(error=ctb.NOT_SYNCED)
    assert got.error == "ClusterTrustBundle informer has not yet synced"  # upstream's words
    assert h.woken == []
    await h.until(lambda: h.woken)  # the informer's backoff: 0.01, 0.02, 0.04, 0.08, 0.16, then the list
    assert names(await h.manager.bundles()) == {"a": pem(b"root")}
    assert h.woken == [{"u1"}]  # told "not synced": woken by the first list, though it reads no bundle that exists
    await h.stop()


async def test_the_first_caller_waits_for_the_sync_and_so_do_the_ones_behind_it(harness: Harness) -> None:
    harness.api.put("ADDED", obj("a"), emit=False)
    first, second = await asyncio.gather(harness.manager.bundles(), harness.manager.bundles())
    assert not first.error and first == second
    assert harness.api.calls.count("/apis/certificates.k8s.io/v1") == 1


async def test_the_cache_is_served_while_the_watch_is_broken() -> None:
    h = Harness()
    h.api.put("ADDED", obj("a"), emit=False)
    assert not (await h.manager.bundles()).error
    h.api.list_errors = [ConnectionResetError("reset")] * 50
    h.api.events.put_nowait(ConnectionResetError("reset"))
    await h.settle(0.05)
    assert names(await h.manager.bundles()) == {"a": pem(b"root")}  # HasSynced stays true
    await h.stop()


# --------------------------------------------------------------------------------------------- the cache


async def test_added_modified_deleted_update_the_cache(harness: Harness) -> None:
    api, bundles = harness.api, harness.manager.bundles
    api.put("ADDED", obj("a", trust=b"one"), emit=False)
    assert names(await bundles()) == {"a": pem(b"one")}
    api.put("ADDED", obj("b", "s/b", b"two"))
    await harness.settle()
    assert names(await bundles()) == {"a": pem(b"one"), "b": pem(b"two")}
    assert (await bundles()).items[1] == ClusterTrustBundle("b", "s/b", pem(b"two"))
    api.put("MODIFIED", obj("a", trust=b"three"))
    await harness.settle()
    assert names(await bundles()) == {"a": pem(b"three"), "b": pem(b"two")}
    api.put("DELETED", obj("a", trust=b"three"))
    await harness.settle()
    assert names(await bundles()) == {"b": pem(b"two")}
    assert [c for c in api.calls if c.endswith("/clustertrustbundles")] == [
        "/apis/certificates.k8s.io/v1/clustertrustbundles"]  # one list: the rest came by the watch
    assert api.calls[-1] == "WATCH /apis/certificates.k8s.io/v1/clustertrustbundles?resourceVersion=11"


async def test_410_gone_lists_again_and_wakes_only_the_pods_of_what_changed(harness: Harness) -> None:
    api, m = harness.api, harness.manager
    for name in ("same", "changed", "gone"):
        api.put("ADDED", obj(name, trust=name.encode()), emit=False)
    for uid, name in (("u-same", "same"), ("u-changed", "changed"), ("u-gone", "gone"), ("u-new", "new")):
        await m.for_pod(make_pod(uid, {"name": name, "optional": True, "path": "ca.pem"}))
    assert harness.woken == []
    api.put("MODIFIED", obj("changed", trust=b"changed again"), emit=False)
    api.put("DELETED", obj("gone"), emit=False)
    api.put("ADDED", obj("new", trust=b"new"), emit=False)
    api.events.put_nowait(KubeApiError(410, "Expired", "too old resource version", "WATCH", "/x"))
    await harness.settle()
    assert names(await m.bundles()) == {"same": pem(b"same"), "changed": pem(b"changed again"), "new": pem(b"new")}
    assert harness.woken == [{"u-changed", "u-gone", "u-new"}]
    assert [c for c in api.calls if c.endswith("/clustertrustbundles")] == [
        "/apis/certificates.k8s.io/v1/clustertrustbundles"] * 2


# ------------------------------------------------------------------------------------------------ wakes


async def test_a_changed_bundle_wakes_the_pods_that_read_it(harness: Harness) -> None:
    api, m = harness.api, harness.manager
    api.put("ADDED", obj("a", "s/x", b"a", tier="web"), emit=False)
    api.put("ADDED", obj("plain", trust=b"p"), emit=False)
    pods = {
        "by-name": make_pod("by-name", {"name": "a", "path": "a.pem"}),
        "by-signer": make_pod("by-signer", {"signerName": "s/x", "labelSelector": {"matchLabels": {"tier": "db"}},
                                            "path": "x.pem"}),
        "plain": make_pod("plain", {"name": "plain", "path": "p.pem"}),
        "other-signer": make_pod("other-signer", {"signerName": "s/y", "labelSelector": {}, "path": "y.pem"}),
    }
    for pod in pods.values():
        await m.for_pod(pod)
    assert harness.woken == []  # set up from the synced cache: nobody was told "not synced"

    async def woken_by(kind: str, body: dict[str, Any]) -> set[str]:
        harness.woken.clear()
        api.put(kind, body)
        await harness.settle()
        return harness.woken_uids()

    # a's labels now match the selector of by-signer; by-name reads a whatever its signer
    assert await woken_by("MODIFIED", obj("a", "s/x", b"a", tier="db")) == {"by-name", "by-signer"}
    assert await woken_by("ADDED", obj("b", "s/x", b"b")) == {"by-signer"}  # a new bundle of the signer
    assert await woken_by("ADDED", obj("c", "s/z", b"c")) == set()
    assert await woken_by("MODIFIED", obj("plain", trust=b"p2")) == {"plain"}
    assert await woken_by("DELETED", obj("b", "s/x", b"b")) == {"by-signer"}
    assert await woken_by("ADDED", obj("d", "s/y", b"d")) == {"other-signer"}
    m.forget("other-signer")  # the pod is gone: no more wakes
    assert await woken_by("MODIFIED", obj("d", "s/y", b"d2")) == set()


async def test_a_bookmark_wakes_nobody(harness: Harness) -> None:
    await harness.manager.for_pod(make_pod("u1", {"name": "a", "optional": True, "path": "a.pem"}))
    harness.api.events.put_nowait({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "99"}}})
    await harness.settle()
    assert harness.woken == []


# ------------------------------------------------------------------------------------- the VolumeManager


def volume_manager(tmp_path: Path, bundles: ClusterTrustBundleManager | None) -> manager.VolumeManager:
    return manager.VolumeManager(AgentConfig(node_name="n"), None, layout=Layout(str(tmp_path)),  # type: ignore[arg-type]
                                 trust_bundles=bundles)


async def test_setup_reads_the_bundles_only_for_pods_that_project_them_and_follows_their_changes(
        harness: Harness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    written: list[dict[str, plugins.VolumePlan]] = []
    monkeypatch.setattr(manager, "materialize", lambda plans, fs_group: written.append(dict(plans)))
    harness.api.put("ADDED", obj("a", trust=b"one"), emit=False)
    volumes = volume_manager(tmp_path, harness.manager)
    await volumes.setup(pod_from_body({"metadata": {"name": "e", "namespace": "ns", "uid": "e"},
                                       "spec": {"volumes": [{"name": "e", "emptyDir": {}}],
                                                "containers": [{"name": "app", "image": "agnhost"}]}}))
    assert harness.api.calls == [] and harness.manager.version is None  # nothing asked: the informer not started
    pod = make_pod("u1", {"name": "a", "path": "ca.pem"})
    plans = await volumes.setup(pod)
    assert plans["ctb"].files == (FileEntry("ca.pem", pem(b"one").encode(), 0o644),) and written[-1] == plans
    harness.api.put("MODIFIED", obj("a", trust=b"two"))
    await harness.settle()
    assert harness.woken == [{"u1"}]
    assert (await volumes.setup(pod))["ctb"].files == (FileEntry("ca.pem", pem(b"two").encode(), 0o644),)
    volumes.forget("u1")
    harness.api.put("MODIFIED", obj("a", trust=b"three"))
    await harness.settle()
    assert harness.woken == [{"u1"}]


async def test_setup_before_the_sync_is_upstreams_failed_mount(tmp_path: Path) -> None:
    h = Harness(sync_wait=0.01)
    h.api.list_errors = [ConnectionRefusedError("refused")] * 100
    with pytest.raises(VolumeError) as info:
        await volume_manager(tmp_path, h.manager).setup(make_pod("u1", {"name": "a", "path": "ca.pem"}))
    assert str(info.value) == ('MountVolume.SetUp failed for volume "ctb" : ClusterTrustBundle informer has not yet '
                               "synced")
    await h.stop()


async def test_without_a_manager_sources_fail_as_upstreams_noop_manager(tmp_path: Path) -> None:
    with pytest.raises(VolumeError, match=f"{ctb.NOT_SUPPORTED}$"):
        await volume_manager(tmp_path, None).setup(make_pod("u1", {"name": "a", "path": "ca.pem"}))
