"""The ``cpu_manager_state`` checkpoint: the bytes and checksums a v1.37.1 kubelet writes, and the restore checks.

Every expected checksum and file text here was produced by Go running upstream's code path
(`CPUManagerCheckpoint.MarshalCheckpoint`: encoding/json, k8s.io/utils/dump.ForHash's spew config with go-spew
d8f796af33cc, hash/fnv New32a), so a match means a kubelet and kopflet read each other's files."""

from __future__ import annotations

from typing import Any

import pytest

from kopflet.cm.cpumanager import state as cs
from kopflet.cm.cpumanager import static_policy as sp
from kopflet.cm.cpumanager import topology
from kopflet.cm.cpumanager.cpuset import parse
from kopflet.cm.cpumanager.static_policy import State
from tests.unit.test_cpumanager_assignment import TWO_SOCKET_EIGHT_CORE_HT
from tests.unit.test_cpumanager_static_policy import make_pod, res

GO_NONE = ('{"policyName":"none","defaultCpuSet":"","checksum":1353318690,'
           '"data":"{\\"policyName\\":\\"none\\",\\"defaultCpuSet\\":\\"\\"}","dataChecksum":3028111495}')
GO_STATIC_EMPTY = ('{"policyName":"static","defaultCpuSet":"0-7","checksum":14413152,'
                   '"data":"{\\"policyName\\":\\"static\\",\\"defaultCpuSet\\":\\"0-7\\"}","dataChecksum":3294586087}')
GO_TWO_PODS = ('{"policyName":"static","defaultCpuSet":"0,3-7","entries":{"pod-a":{"main":"8"},'
               '"pod-b":{"c1":"1","c2":"2"}},"checksum":1121984383,"data":"{\\"policyName\\":\\"static\\",'
               '\\"defaultCpuSet\\":\\"0,3-7\\",\\"entries\\":{\\"pod-a\\":{\\"main\\":\\"8\\"},\\"pod-b\\":'
               '{\\"c1\\":\\"1\\",\\"c2\\":\\"2\\"}}}","dataChecksum":2599719328}')
GO_UID = ('{"policyName":"static","defaultCpuSet":"0-1,4-15","entries":{"7f6f7d3b-0f1a-4c52-9a5b-3f1e2d4c5b6a":'
          '{"app":"2-3"}},"checksum":1725793286,"data":"{\\"policyName\\":\\"static\\",\\"defaultCpuSet\\":'
          '\\"0-1,4-15\\",\\"entries\\":{\\"7f6f7d3b-0f1a-4c52-9a5b-3f1e2d4c5b6a\\":{\\"app\\":\\"2-3\\"}}}",'
          '"dataChecksum":3098963731}')


def st(default: str, assignments: dict[str, dict[str, str]] | None = None) -> State:
    return State(default=parse(default),
                 assignments={u: {n: parse(c) for n, c in v.items()} for u, v in (assignments or {}).items()})


@pytest.mark.parametrize(("policy", "state", "expected"), [
    ("none", st(""), GO_NONE),
    ("static", st("0-7"), GO_STATIC_EMPTY),
    ("static", st("0,3-7", {"pod-b": {"c2": "2", "c1": "1"}, "pod-a": {"main": "8"}}), GO_TWO_PODS),
    ("static", st("0-1,4-15", {"7f6f7d3b-0f1a-4c52-9a5b-3f1e2d4c5b6a": {"app": "2-3"}}), GO_UID),
])
def test_encode_matches_go_bytes(policy: str, state: State, expected: str) -> None:
    assert cs.encode(policy, state) == expected
    restored = cs.restore(cs.decode(expected), policy)
    assert restored == state


@pytest.mark.parametrize(("policy", "default", "entries", "checksum"), [
    ("static", "0,3-7", {"pod-b": {"c2": "2", "c1": "1"}, "pod-a": {"main": "<1&>"}}, 183347020),
    ("static", "0", {"p": {}}, 3797055940),
    ('stätic "q"', "", None, 1397171754),  # a nil map spews as <nil>
])
def test_checksum_matches_go(policy: str, default: str, entries: dict[str, dict[str, str]] | None,
                             checksum: int) -> None:
    assert cs.checksum(policy, default, entries) == checksum


@pytest.mark.parametrize(("data", "checksum"), [
    ('{"policyName":"static","defaultCpuSet":"0,3-7","entries":{"pod-a":{"main":"\\u003c1\\u0026\\u003e"},'
     '"pod-b":{"c1":"1","c2":"2"}}}', 1281900180),
    ('{"policyName":"static","defaultCpuSet":"0","entries":{"p":{}}}', 1298788619),
    ('{"policyName":"stätic \\"q\\"","defaultCpuSet":""}', 60172150),
])
def test_data_checksum_matches_go(data: str, checksum: int) -> None:
    assert cs.data_checksum(data) == checksum


# ---------------------------------------------------------------------------------- decode (with fallbacks)

LEGACY_V2 = '{"policyName":"static","defaultCpuSet":"0-1,4-15","entries":{"7f6f7d3b-0f1a-4c52-9a5b-3f1e2d4c5b6a":' \
            '{"app":"2-3"}},"checksum":1725793286}'
LEGACY_V3 = '{"policyName":"static","defaultCpuSet":"0-3,6-7","entries":{"uid":{"c":"4-5"}},"checksum":%d}'


@pytest.mark.parametrize(("name", "text", "policy", "default", "entries"), [
    ("V2 file from an older kubelet", LEGACY_V2, "static", "0-1,4-15",
     {"7f6f7d3b-0f1a-4c52-9a5b-3f1e2d4c5b6a": {"app": "2-3"}}),
    ("V3 file, checksum with the V3 type name", LEGACY_V3 % 1022272000, "static", "0-3,6-7", {"uid": {"c": "4-5"}}),
    ("V3 file, checksum with the rewritten name", LEGACY_V3 % 460675467, "static", "0-3,6-7", {"uid": {"c": "4-5"}}),
    ("legacy checksum 0 is not checked", '{"policyName":"static","defaultCpuSet":"0-3","checksum":0}',
     "static", "0-3", {}),
    ("V4: only data counts, the top-level copy is ignored",
     GO_STATIC_EMPTY.replace('"defaultCpuSet":"0-7","checksum":14413152', '"defaultCpuSet":"9","checksum":1'),
     "static", "0-7", {}),
])
def test_decode(name: str, text: str, policy: str, default: str, entries: dict[str, Any]) -> None:
    got = cs.decode(text)
    assert (got.policy_name, got.default_cpu_set, got.entries) == (policy, default, entries), name


@pytest.mark.parametrize(("name", "text", "error"), [
    ("not JSON", "{", "failed to deserialize cpu manager checkpoint: "),
    ("data tampered", GO_STATIC_EMPTY.replace('0-7\\"', '0-6\\"'),
     "could not load v4 checkpoint: checkpoint is corrupted"),
    ("dataChecksum tampered", GO_STATIC_EMPTY.replace("3294586087", "3294586088"),
     "could not load v4 checkpoint: checkpoint is corrupted"),
    ("data not JSON", '{"data":"{","dataChecksum":1}',
     "could not load v4 checkpoint: failed to deserialize cpu manager checkpoint data: "),
    ("legacy checksum tampered", LEGACY_V2.replace("1725793286", "1725793287"), "checkpoint is corrupted"),
    ("legacy entries tampered", LEGACY_V2.replace('"app":"2-3"', '"app":"2-4"'), "checkpoint is corrupted"),
])
def test_decode_errors(name: str, text: str, error: str) -> None:
    with pytest.raises(cs.CheckpointError) as err:
        cs.decode(text)
    assert str(err.value).startswith(error), name


# -------------------------------------------------------------------------------------------------- restore

@pytest.mark.parametrize(("checkpoint", "error"), [
    (cs.Checkpoint("none", "0-7", {}), 'configured policy "static" differs from state checkpoint policy "none"'),
    (cs.Checkpoint("static", "0-x", {}),
     'could not parse default CPU set "0-x": strconv.Atoi: parsing "x": invalid syntax'),
    (cs.Checkpoint("static", "0-7", {"pod": {"c": "3-1"}}),
     'could not parse cpuset "3-1" for container "c" in pod "pod": invalid range "3-1" (3 > 1)'),
])
def test_restore_errors(checkpoint: cs.Checkpoint, error: str) -> None:
    with pytest.raises(cs.CheckpointError) as err:
        cs.restore(checkpoint, "static")
    assert str(err.value) == error


def test_restore_failure_message() -> None:
    err = cs.CheckpointError("checkpoint is corrupted")
    assert cs.restore_failure(err, "/var/lib/kubelet/cpu_manager_state") == (
        'could not restore state from checkpoint: checkpoint is corrupted, please drain this node and delete the '
        'CPU manager checkpoint file "/var/lib/kubelet/cpu_manager_state" before restarting Kubelet')


def test_state_survives_a_restart() -> None:
    """Allocate, write, read back, validate against the same topology: the same assignments and shared set."""
    p = sp.new_static_policy(TWO_SOCKET_EIGHT_CORE_HT, 2)
    state = sp.validate_state(p, State())
    assert str(state.default) == "0-15"
    pod = make_pod("uid-1", ("a", res("2")), ("b", res("3")))
    for container in pod.spec.containers:
        state = sp.allocate(p, state, pod, container)
    text = cs.encode(sp.POLICY_NAME, state)
    restored = sp.validate_state(p, cs.restore(cs.decode(text), sp.POLICY_NAME))
    assert restored == state
    assert str(restored.default) == "0,4-8,11-15"
    # the restored state on a machine that lost a CPU is refused, as upstream validateState does
    smaller = sp.new_static_policy(_drop(15), 2)
    with pytest.raises(sp.PolicyError, match="doesn't match with CPUs in state"):
        sp.validate_state(smaller, restored)


def _drop(cpu: int) -> topology.CPUTopology:
    infos = {c: i for c, i in TWO_SOCKET_EIGHT_CORE_HT.details.items() if c != cpu}
    return topology.from_cpu_infos(infos)
