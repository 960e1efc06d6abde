"""kopflet.kuberuntime.gc.evictable: keep the newest dead instance per container, drop old sandboxes."""

from __future__ import annotations

import pytest

from kopflet.container.podstate import ContainerInfo, RuntimePodStatus, SandboxInfo, State
from kopflet.kuberuntime.gc import Evictions, evictable


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
