"""kopflet.kuberuntime.gc.evictable: keep the newest dead instance per container, drop old sandboxes."""

from __future__ import annotations

import pytest

from kopflet.container.podstate import ContainerInfo, RuntimePodStatus, SandboxInfo, State
from kopflet.kuberuntime.gc import Evictions, GCPolicy, collect, evictable


def c(cid: str, name: str, state: State, created: int, sandbox: str = "s1") -> ContainerInfo:
    return ContainerInfo(id=cid, name=name, state=state, created_at=created, sandbox_id=sandbox)


def s(sid: str, ready: bool, created: int) -> SandboxInfo:
    return SandboxInfo(id=sid, ready=ready, created_at=created, ip="10.88.0.2")


def pod(sandboxes: list[SandboxInfo], containers: list[ContainerInfo]) -> RuntimePodStatus:
    return RuntimePodStatus(uid="u", sandboxes=tuple(sorted(sandboxes, key=lambda x: -x.created_at)),
                            containers=tuple(sorted(containers, key=lambda x: -x.created_at)))


@pytest.mark.parametrize(("runtime", "expected"), [
    pytest.param(pod([s("s1", True, 1)], [c("a1", "a", State.RUNNING, 1)]), Evictions(), id="nothing dead"),
    pytest.param(pod([s("s1", True, 1)], [c("a1", "a", State.EXITED, 1), c("a2", "a", State.RUNNING, 2)]),
                 Evictions(), id="the one dead instance behind a running one is kept (lastState)"),
    pytest.param(pod([s("s1", True, 1)], [c("a1", "a", State.EXITED, 1), c("a2", "a", State.EXITED, 2),
                                          c("a3", "a", State.EXITED, 3), c("a4", "a", State.RUNNING, 4)]),
                 Evictions(containers=("a2", "a1")), id="older dead instances go, newest first order"),
    pytest.param(pod([s("s1", True, 1)], [c("a1", "a", State.EXITED, 1), c("b1", "b", State.EXITED, 2)]),
                 Evictions(), id="one dead instance per container name"),
    pytest.param(pod([s("s1", False, 1), s("s2", True, 2)],
                     [c("a1", "a", State.EXITED, 1, "s1"), c("a2", "a", State.RUNNING, 2, "s2")]),
                 Evictions(), id="an old sandbox still holding a kept container stays"),
    pytest.param(pod([s("s1", False, 1), s("s2", True, 2)],
                     [c("a1", "a", State.EXITED, 1, "s1"), c("a2", "a", State.EXITED, 2, "s2"),
                      c("a3", "a", State.RUNNING, 3, "s2")]),
                 Evictions(containers=("a1",), sandboxes=("s1",)), id="an old empty sandbox goes"),
    pytest.param(pod([s("s1", False, 1)], [c("a1", "a", State.EXITED, 1, "s1")]), Evictions(),
                 id="the newest sandbox stays even when not ready"),
    pytest.param(pod([s("s1", True, 1)], [c("a1", "a", State.CREATED, 1), c("a2", "a", State.RUNNING, 2)]),
                 Evictions(containers=("a1",)), id="a never-started instance superseded by a newer one goes"),
    pytest.param(pod([s("s1", True, 1)], [c("a1", "a", State.EXITED, 1), c("a2", "a", State.CREATED, 2),
                                          c("a3", "a", State.RUNNING, 3)]),
                 Evictions(containers=("a2",)), id="and does not count as the kept dead instance"),
    pytest.param(pod([s("s1", True, 1)], [c("a1", "a", State.EXITED, 1), c("a2", "a", State.CREATED, 2)]),
                 Evictions(containers=("a1",)), id="the newest instance, even created only, stays"),
])
def test_evictable(runtime: RuntimePodStatus, expected: Evictions) -> None:
    assert evictable(runtime) == expected


SEC = 1_000_000_000


def pods_of(**by_uid: tuple[list[SandboxInfo], list[ContainerInfo]]) -> dict[str, RuntimePodStatus]:
    return {uid: RuntimePodStatus(uid=uid, sandboxes=tuple(sbs), containers=tuple(cs))
            for uid, (sbs, cs) in by_uid.items()}


@pytest.mark.parametrize(("pods", "policy", "remove_all", "expected"), [
    pytest.param(pods_of(p=([s("s1", True, 1)], [c("a1", "a", State.EXITED, 1), c("a2", "a", State.EXITED, 2),
                                                 c("a3", "a", State.RUNNING, 3)])),
                 GCPolicy(), (), Evictions(containers=("a1",)), id="default: the newest dead instance is kept"),
    pytest.param(pods_of(p=([s("s1", True, 1)], [c("a1", "a", State.EXITED, 1), c("a2", "a", State.EXITED, 2)])),
                 GCPolicy(max_per_pod_container=-1), (), Evictions(), id="no per-container limit"),
    pytest.param(pods_of(p=([s("s1", True, 1)], [c("a1", "a", State.EXITED, 1), c("a2", "a", State.EXITED, 2)])),
                 GCPolicy(max_per_pod_container=0), (), Evictions(containers=("a2", "a1")), id="keep none"),
    pytest.param(pods_of(p=([s("s1", True, 1)], [c("a1", "a", State.EXITED, 1), c("a2", "a", State.EXITED, 99 * SEC)])),
                 GCPolicy(min_age=10, max_per_pod_container=0), (), Evictions(containers=("a1",)),
                 id="younger than min age: kept"),
    pytest.param(pods_of(p=([s("s1", True, 1)], [c("a1", "a", State.EXITED, 1), c("b1", "b", State.EXITED, 3)]),
                         q=([s("s2", True, 1)], [c("c1", "c", State.EXITED, 2)])),
                 GCPolicy(max_containers=2), (), Evictions(containers=("a1",)),
                 id="node cap: one per unit, then the oldest overall"),
    pytest.param(pods_of(p=([s("s1", True, 1)], [c("a1", "a", State.EXITED, 1), c("a2", "a", State.EXITED, 4),
                                                 c("b1", "b", State.EXITED, 2), c("b2", "b", State.EXITED, 3)])),
                 GCPolicy(max_per_pod_container=-1, max_containers=2), (), Evictions(containers=("a1", "b1")),
                 id="node cap shared evenly between units"),
    pytest.param(pods_of(p=([s("s1", False, 1), s("s2", False, 2)],
                            [c("a1", "a", State.EXITED, 1, "s1"), c("a2", "a", State.EXITED, 2, "s2")])),
                 GCPolicy(), ("p",), Evictions(containers=("a1", "a2"), sandboxes=("s2", "s1")),
                 id="a removed pod loses every dead container and every inactive sandbox"),
    pytest.param(pods_of(p=([s("s1", True, 1)], [c("a1", "a", State.RUNNING, 1)])),
                 GCPolicy(), ("p",), Evictions(), id="running containers and ready sandboxes are never chosen"),
    pytest.param(pods_of(p=([s("s1", False, 1), s("s2", False, 2), s("s3", True, 3)],
                            [c("a1", "a", State.EXITED, 1, "s1"), c("a2", "a", State.RUNNING, 2, "s3")])),
                 GCPolicy(), (), Evictions(sandboxes=("s2",)),
                 id="an old sandbox holding the kept dead container stays; an empty one goes"),
])
def test_node_wide_collect(pods: dict[str, RuntimePodStatus], policy: GCPolicy, remove_all: tuple[str, ...],
                           expected: Evictions) -> None:
    assert collect(pods, policy, remove_all, now_ns=100 * SEC) == expected
