"""cpuset text forms, the sysfs topology parser and upstream's packed takeByTopology, table-driven with
upstream's own cases (cpuset_test.go, topology_test.go, cpu_assignment_test.go at v1.37.1)."""

from __future__ import annotations

import pytest

from kopflet.cm.cpumanager import assignment, cpuset, topology
from kopflet.cm.cpumanager.cpuset import CPUSet, parse
from kopflet.cm.cpumanager.topology import CPUInfo, CPUTopology


def topo(infos: dict[int, tuple[int, int, int]]) -> CPUTopology:
    """cpu -> (core, socket, numa), as upstream's policy_test.go topologies are written."""
    return topology.from_cpu_infos({cpu: CPUInfo(numa_node_id=n, socket_id=s, core_id=c, uncore_cache_id=s)
                                    for cpu, (c, s, n) in infos.items()})


# upstream policy_test.go fixtures
SINGLE_SOCKET_HT = topo({i: (i % 4, 0, 0) for i in range(8)})
DUAL_SOCKET_HT = topo({i: (i % 6, i % 2, i % 2) for i in range(12)})
DUAL_SOCKET_NO_HT = topo({i: (i, i // 4, i // 4) for i in range(8)})
# 2 sockets x 2 NUMA nodes x 10 cores x 2 threads; cpu i and i+40 are siblings
DUAL_SOCKET_MULTI_NUMA_HT = topo({i: (i % 40, (i % 40) // 20, (i % 40) // 10) for i in range(80)})
# 2 sockets x 4 cores x 2 threads, siblings i and i+8 (the "2-socket 8-core HT" machine of the issue)
TWO_SOCKET_EIGHT_CORE_HT = topo({i: (i % 8, (i % 8) // 4, (i % 8) // 4) for i in range(16)})


# ------------------------------------------------------------------------------------------------ cpuset

@pytest.mark.parametrize(("text", "cpus", "canonical"), [
    ("", [], ""),
    ("0", [0], "0"),
    ("1", [1], "1"),
    ("0-3,7", [0, 1, 2, 3, 7], "0-3,7"),
    ("3,2,1,0", [0, 1, 2, 3], "0-3"),
    ("0,1,2,3", [0, 1, 2, 3], "0-3"),
    ("0-1,4-15", [0, 1, *range(4, 16)], "0-1,4-15"),
    ("5-5", [5], "5"),
    ("1,1,1", [1], "1"),
    ("0-2,1-3", [0, 1, 2, 3], "0-3"),
    ("+3", [3], "3"),
])
def test_parse_and_string(text: str, cpus: list[int], canonical: str) -> None:
    parsed = parse(text)
    assert parsed.sorted() == cpus
    assert str(parsed) == canonical
    assert parse(str(parsed)) == parsed


@pytest.mark.parametrize(("text", "error"), [
    ("nonnumeric", 'strconv.Atoi: parsing "nonnumeric": invalid syntax'),
    ("non-numeric", 'strconv.Atoi: parsing "non": invalid syntax'),
    ("5-3", 'invalid range "5-3" (5 > 3)'),
    ("0-3,", 'strconv.Atoi: parsing "": invalid syntax'),
    ("-1", 'strconv.Atoi: parsing "": invalid syntax'),
    ("1-", 'strconv.Atoi: parsing "": invalid syntax'),
    (" 1", 'strconv.Atoi: parsing " 1": invalid syntax'),
    ("0-1-2", 'strconv.Atoi: parsing "1-2": invalid syntax'),
    ("99999999999999999999", 'strconv.Atoi: parsing "99999999999999999999": value out of range'),
])
def test_parse_errors(text: str, error: str) -> None:
    with pytest.raises(cpuset.CPUSetError) as err:
        parse(text)
    assert str(err.value) == error


def test_set_operations_return_new_sets() -> None:
    a, b = parse("0-3"), parse("2-5")
    assert str(a | b) == "0-5"
    assert str(a & b) == "2-3"
    assert str(a - b) == "0-1"
    assert str(a.union(b, parse("9"))) == "0-5,9"
    assert parse("2").is_subset_of(a) and not b.is_subset_of(a)
    assert str(a) == "0-3"  # unchanged
    assert CPUSet().is_empty() and not CPUSet()
    assert a == parse("3,2,1,0") and hash(a) == hash(parse("0-3"))
    assert list(parse("7,1,3")) == [1, 3, 7]


# ---------------------------------------------------------------------------------------------- topology

def _sysfs(cpus: dict[int, tuple[int, int]], nodes: dict[int, str], offline: tuple[int, ...] = ()) -> dict[str, str]:
    """cpu -> (physical_package_id, core_id); node -> cpulist."""
    files: dict[str, str] = {}
    for cpu, (package, core) in cpus.items():
        files[f"/sys/devices/system/cpu/cpu{cpu}/topology/physical_package_id"] = f"{package}\n"
        files[f"/sys/devices/system/cpu/cpu{cpu}/topology/core_id"] = f"{core}\n"
        files[f"/sys/devices/system/cpu/cpu{cpu}/online"] = "0\n" if cpu in offline else "1\n"
    for node, cpulist in nodes.items():
        files[f"/sys/devices/system/node/node{node}/cpulist"] = cpulist + "\n"
    return files


def test_sysfs_two_socket_ht() -> None:
    # 2 packages, 4 cores each, core_id restarting per package (as on real machines), threads i and i+8
    files = _sysfs({i: ((i % 8) // 4, i % 4) for i in range(16)}, {0: "0-3,8-11", 1: "4-7,12-15"})
    t = topology.from_sysfs(files)
    assert (t.num_cpus, t.num_cores, t.num_sockets, t.num_numa_nodes) == (16, 8, 2, 2)
    assert t.cpus_per_core() == 2 and t.cpus_per_socket() == 8
    assert t.details[12] == CPUInfo(numa_node_id=1, socket_id=1, core_id=4, uncore_cache_id=1)  # core = min thread
    assert str(t.details.cpus_in_cores(4)) == "4,12"
    assert str(t.details.cpus_in_sockets(0)) == "0-3,8-11"
    assert t.details == TWO_SOCKET_EIGHT_CORE_HT.details


@pytest.mark.parametrize(("name", "files", "expected"), [
    ("no NUMA directories: each socket is a node",
     _sysfs({0: (0, 0), 1: (0, 1), 2: (1, 0), 3: (1, 1)}, {}), (4, 4, 2, 2)),
    ("offline CPU left out",
     _sysfs({0: (0, 0), 1: (0, 0), 2: (0, 1), 3: (0, 1)}, {0: "0-3"}, offline=(3,)), (3, 2, 1, 1)),
    ("one socket, two NUMA nodes (sub-NUMA clustering)",
     _sysfs({i: (0, i) for i in range(4)}, {0: "0-1", 1: "2-3"}), (4, 4, 1, 2)),
])
def test_sysfs_shapes(name: str, files: dict[str, str], expected: tuple[int, int, int, int]) -> None:
    t = topology.from_sysfs(files)
    assert (t.num_cpus, t.num_cores, t.num_sockets, t.num_numa_nodes) == expected, name


@pytest.mark.parametrize(("files", "error"), [
    ({}, "could not detect number of cpus"),
    ({"/sys/devices/system/cpu/cpu0/topology/core_id": "0"}, "cpu0: missing"),
    ({"/sys/devices/system/cpu/cpu0/topology/core_id": "x",
      "/sys/devices/system/cpu/cpu0/topology/physical_package_id": "0"}, "not a number"),
    ({**_sysfs({0: (0, 0)}, {}), "/sys/devices/system/node/node0/cpulist": "1-0"}, 'invalid range "1-0"'),
])
def test_sysfs_errors(files: dict[str, str], error: str) -> None:
    with pytest.raises(topology.TopologyError, match=error):
        topology.from_sysfs(files)


def test_sysfs_paths_cover_what_the_parser_reads() -> None:
    paths = topology.sysfs_paths([0, 1], [0])
    assert "/sys/devices/system/cpu/cpu1/topology/core_id" in paths
    assert paths[-1] == "/sys/devices/system/node/node0/cpulist"


def test_unknown_cpu() -> None:
    with pytest.raises(topology.TopologyError, match="unknown CPU ID: 99"):
        DUAL_SOCKET_HT.cpu_core_id(99)


# ----------------------------------------------------------------------------------- takeByTopology (packed)

@pytest.mark.parametrize(("name", "t", "available", "num", "expected"), [
    # upstream commonTakeByTopologyTestCases
    ("take zero cpus from single socket with HT", SINGLE_SOCKET_HT, "0-7", 0, ""),
    ("take one cpu from single socket with HT", SINGLE_SOCKET_HT, "0-7", 1, "0"),
    ("take one cpu from single socket with HT, some cpus are taken", SINGLE_SOCKET_HT, "1,3,5-7", 1, "6"),
    ("take two cpus from single socket with HT", SINGLE_SOCKET_HT, "0-7", 2, "0,4"),
    ("take all cpus from single socket with HT", SINGLE_SOCKET_HT, "0-7", 8, "0-7"),
    ("take two cpus from single socket with HT, only one core totally free", SINGLE_SOCKET_HT, "0-3,6", 2, "2,6"),
    ("take a socket of cpus from dual socket with HT", DUAL_SOCKET_HT, "0-11", 6, "0,2,4,6,8,10"),
    ("take a socket of cpus from dual socket with multi-numa-per-socket with HT",
     DUAL_SOCKET_MULTI_NUMA_HT, "0-79", 40, "0-19,40-59"),
    ("take a NUMA node of cpus from dual socket with multi-numa-per-socket with HT",
     DUAL_SOCKET_MULTI_NUMA_HT, "0-79", 20, "0-9,40-49"),
    ("take a NUMA node of cpus from dual socket with multi-numa-per-socket with HT, with 1 NUMA node already taken",
     DUAL_SOCKET_MULTI_NUMA_HT, "10-39,50-79", 20, "10-19,50-59"),
    ("take a socket and a NUMA node of cpus from dual socket with multi-numa-per-socket with HT",
     DUAL_SOCKET_MULTI_NUMA_HT, "0-79", 60, "0-29,40-69"),
    ("take a socket and a NUMA node of cpus from dual socket with multi-numa-per-socket with HT, a core taken",
     DUAL_SOCKET_MULTI_NUMA_HT, "1-39,41-79", 60, "10-39,50-79"),
    # upstream TestTakeByTopologyNUMAPacked
    ("take one cpu from dual socket with HT - core from Socket 0", DUAL_SOCKET_HT, "1-5,7-11", 1, "2"),
    ("allocate 4 full cores with 3 coming from the first NUMA node (filling it up) and 1 coming from the second",
     DUAL_SOCKET_HT, "0-11", 8, "0-2,4,6-8,10"),
    ("allocate 32 full cores with 30 coming from the first 3 NUMA nodes and 2 coming from the fourth",
     DUAL_SOCKET_MULTI_NUMA_HT, "0-79", 64, "0-31,40-71"),
    # the 2-socket 8-core HT machine
    ("one thread: the lowest core's first thread", TWO_SOCKET_EIGHT_CORE_HT, "0-15", 1, "0"),
    ("a core: both threads", TWO_SOCKET_EIGHT_CORE_HT, "1-15", 2, "1,9"),
    ("one thread fills a half-taken core first", TWO_SOCKET_EIGHT_CORE_HT, "1-15", 1, "8"),
    ("a socket: the whole of it", TWO_SOCKET_EIGHT_CORE_HT, "0-15", 8, "0-3,8-11"),
    ("the fuller socket first (fewer free CPUs)", TWO_SOCKET_EIGHT_CORE_HT, "1-7,9-15", 4, "1-2,9-10"),
    ("a socket and a core", TWO_SOCKET_EIGHT_CORE_HT, "0-15", 10, "0-4,8-12"),
    ("odd count: whole cores then one thread", TWO_SOCKET_EIGHT_CORE_HT, "0-15", 3, "0-1,8"),
    ("no HT: a socket", DUAL_SOCKET_NO_HT, "0-7", 4, "0-3"),
])
def test_take_by_topology(name: str, t: CPUTopology, available: str, num: int, expected: str) -> None:
    assert str(assignment.take_by_topology(t, parse(available), num)) == expected, name


@pytest.mark.parametrize(("t", "available", "num", "error"), [
    (SINGLE_SOCKET_HT, "0,2,4,6", 5, "not enough cpus available to satisfy request: requested=5, available=4"),
    (TWO_SOCKET_EIGHT_CORE_HT, "", 1, "not enough cpus available to satisfy request: requested=1, available=0"),
    # CPUs unknown to the topology are not available, yet counted in the message as upstream does
    (SINGLE_SOCKET_HT, "6-9", 3, "not enough cpus available to satisfy request: requested=3, available=4"),
])
def test_take_by_topology_errors(t: CPUTopology, available: str, num: int, error: str) -> None:
    with pytest.raises(assignment.AllocationError) as err:
        assignment.take_by_topology(t, parse(available), num)
    assert str(err.value) == error


@pytest.mark.parametrize(("num", "per_core", "available", "error"), [
    (1, 2, 7, "SMT Alignment Error: requested 1 cpus not multiple cpus per core = 2"),
    (15, 4, 100, "SMT Alignment Error: requested 15 cpus not multiple cpus per core = 4"),
    (10, 2, 8, "SMT Alignment Error: not enough free physical CPUs: available physical CPUs = 8, "
               "requested CPUs = 10, CPUs per core = 2"),
    (2, 2, 2, None),
    (3, 1, 3, None),
])
def test_smt_alignment(num: int, per_core: int, available: int, error: str | None) -> None:
    if error is None:
        assignment.check_smt_alignment(num, per_core, available)
        return
    with pytest.raises(assignment.SMTAlignmentError) as err:
        assignment.check_smt_alignment(num, per_core, available)
    assert str(err.value) == error
    assert err.value.reason == "SMTAlignmentError"
