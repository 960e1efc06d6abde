"""kopflet.logs.rotation: upstream container_log_manager.go's rotation decisions and legacy.go's symlink names,
table-driven (the cases follow upstream's container_log_manager_test.go and legacy_test.go)."""

from __future__ import annotations

import datetime as dt

import pytest

from kopflet.logs.rotation import (
    DEFAULT_MAX_FILES,
    DEFAULT_MAX_SIZE,
    LogRotatePolicy,
    RotationPlan,
    all_logs,
    container_id_from_symlink,
    container_log_symlink,
    parse_max_size,
    plan_rotation,
    rotated_name,
    split_unused,
    validate_settings,
)

NOW = dt.datetime(2024, 5, 6, 7, 8, 9)
D = "/var/log/pods/ns_p_u/c"
LOG = f"{D}/0.log"
STAMP = "20240506-070809"


def test_policy_defaults_are_upstreams() -> None:
    policy = LogRotatePolicy()
    assert (policy.max_size, policy.max_files) == (DEFAULT_MAX_SIZE, DEFAULT_MAX_FILES) == (10 * 2**20, 5)
    assert policy.enabled
    assert not LogRotatePolicy(max_size=-1).enabled


@pytest.mark.parametrize("max_files", [1, 0, -3])
def test_policy_refuses_fewer_than_two_files(max_files: int) -> None:
    with pytest.raises(ValueError, match=rf"^invalid MaxFiles {max_files}, must be > 1$"):
        LogRotatePolicy(max_files=max_files)


@pytest.mark.parametrize(("text", "expected"), [
    ("10Mi", 10 * 2**20), ("1Ki", 1024), ("100", 100), ("1k", 1000), ("1e3", 1000), ("-1", -1), ("0", 0),
    (2048, 2048),
])
def test_parse_max_size(text: str | int, expected: int) -> None:
    assert parse_max_size(text) == expected


@pytest.mark.parametrize(("text", "message"), [
    ("ten", "failed to parse container log max size 'ten': quantities must match the regular expression"),
    ("10Zi", "failed to parse container log max size '10Zi': unable to parse quantity's suffix"),
    ("1500m", "failed to parse container log max size '1500m': invalid max log size"),
    ("100Ei", "failed to parse container log max size '100Ei': invalid max log size"),
])
def test_parse_max_size_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_max_size(text)
    assert str(info.value).startswith(message)


@pytest.mark.parametrize(("max_files", "workers", "interval", "errors"), [
    (5, 1, 10, []),
    (2, 4, 3, []),
    (1, 1, 10, ["invalid configuration: containerLogMaxFiles must be greater than 1"]),
    (5, 0, 10, ["invalid configuration: containerLogMaxWorkers must be greater than or equal to 1"]),
    (5, 1, 2.5, ["invalid configuration: containerLogMonitorInterval must be a positive time duration "
                 "greater than or equal to 3s"]),
    (0, 0, 0, ["invalid configuration: containerLogMaxWorkers must be greater than or equal to 1",
               "invalid configuration: containerLogMonitorInterval must be a positive time duration "
               "greater than or equal to 3s",
               "invalid configuration: containerLogMaxFiles must be greater than 1"]),
])
def test_validate_settings(max_files: int, workers: int, interval: float, errors: list[str]) -> None:
    assert validate_settings(max_files, workers, interval) == errors


def test_rotated_name_uses_upstreams_timestamp_format() -> None:
    assert rotated_name(LOG, NOW) == f"{LOG}.{STAMP}"


def p(*names: str) -> tuple[str, ...]:
    return tuple(f"{D}/{n}" for n in names)


# Rotated file names, oldest first.
R1, R2, R3, R4 = "0.log.20240101-000001", "0.log.20240101-000002", "0.log.20240101-000003", "0.log.20240101-000004"
ROTATE = f"{LOG}.{STAMP}"


@pytest.mark.parametrize(("case", "files", "policy", "plan"), [
    ("small enough: nothing, not even cleanup (upstream returns before rotateLog)",
     {"0.log": 99, f"{R1}.tmp": 5, R2: 5, R3: 5, R4: 5}, LogRotatePolicy(100, 2), RotationPlan()),
    ("rotation disabled by a negative max size",
     {"0.log": 10**9}, LogRotatePolicy(-1), RotationPlan()),
    ("the live log is missing: reopen and look again",
     {R1: 5}, LogRotatePolicy(100), RotationPlan(missing=True)),
    ("exactly max size rotates (upstream skips only size < MaxSize)",
     {"0.log": 100}, LogRotatePolicy(100), RotationPlan(rotate_to=ROTATE)),
    ("first rotation: only the rename",
     {"0.log": 200, "1.log": 5}, LogRotatePolicy(100), RotationPlan(rotate_to=ROTATE)),
    ("the previous rotated log is compressed now, the new one stays text",
     {"0.log": 200, R1: 5}, LogRotatePolicy(100, 5), RotationPlan(compress=p(R1), rotate_to=ROTATE)),
    ("max_files 5 keeps 3 rotated: the oldest goes, the uncompressed kept ones are compressed",
     {"0.log": 200, f"{R1}.gz": 5, f"{R2}.gz": 5, f"{R3}.gz": 5, R4: 5}, LogRotatePolicy(100, 5),
     RotationPlan(remove=p(f"{R1}.gz"), compress=p(R4), rotate_to=ROTATE)),
    ("max_files 2 keeps no rotated log: after the rename, the live file and the one just rotated",
     {"0.log": 200, f"{R1}.gz": 5, R2: 5}, LogRotatePolicy(100, 2),
     RotationPlan(remove=p(f"{R1}.gz", R2), rotate_to=ROTATE)),
    ("max_files 3 keeps the newest rotated one",
     {"0.log": 200, f"{R1}.gz": 5, f"{R2}.gz": 5, R3: 5}, LogRotatePolicy(100, 3),
     RotationPlan(remove=p(f"{R1}.gz", f"{R2}.gz"), compress=p(R3), rotate_to=ROTATE)),
    ("cleanup first: temporary files and the text twin of a compressed log are leftovers",
     {"0.log": 200, R1: 5, f"{R1}.gz": 5, f"{R2}.gz.tmp": 5, R2: 5}, LogRotatePolicy(100, 5),
     RotationPlan(remove=p(R1, f"{R2}.gz.tmp"), compress=p(R2), rotate_to=ROTATE)),
    ("leftovers do not count against max_files",
     {"0.log": 200, f"{R1}.tmp": 5, f"{R2}.gz": 5, R3: 5}, LogRotatePolicy(100, 4),
     RotationPlan(remove=p(f"{R1}.tmp"), compress=p(R3), rotate_to=ROTATE)),
    ("other logs of the container (other restarts, a prefix match) are not this log's",
     {"0.log": 200, "10.log": 5, "10.log.20240101-000001": 5, "0.logx": 5, R1: 5}, LogRotatePolicy(100, 2),
     RotationPlan(remove=p(R1), rotate_to=ROTATE)),
])
def test_plan_rotation(case: str, files: dict[str, int], policy: LogRotatePolicy, plan: RotationPlan) -> None:
    assert plan_rotation(LOG, files, policy, NOW) == plan, case


def test_empty_plan() -> None:
    assert RotationPlan().empty
    assert not RotationPlan(missing=True).empty
    assert not RotationPlan(rotate_to="x").empty


@pytest.mark.parametrize(("rotated", "in_use", "unused"), [
    ([], [], []),
    (["a.1", "a.1.gz", "a.2", "a.3.tmp", "a.3.gz.tmp"], ["a.1.gz", "a.2"], ["a.1", "a.3.tmp", "a.3.gz.tmp"]),
])
def test_split_unused(rotated: list[str], in_use: list[str], unused: list[str]) -> None:
    assert split_unused(rotated) == (in_use, unused)


def test_all_logs_lists_the_kept_rotated_logs_oldest_first_then_the_live_one() -> None:
    names = ["0.log", R2, f"{R1}.gz", R1, f"{R3}.tmp", "1.log"]
    assert all_logs(LOG, names) == [f"{D}/{R1}.gz", f"{D}/{R2}", LOG]


CID = "abcdef0123456789" * 4


@pytest.mark.parametrize(("args", "expected"), [
    (("/var/log/containers", "web-0", "shop", "nginx", CID), f"/var/log/containers/web-0_shop_nginx-{CID}.log"),
    (("/tmp/links", "p", "ns", "c", "abc123"), "/tmp/links/p_ns_c-abc123.log"),
])
def test_container_log_symlink(args: tuple[str, str, str, str, str], expected: str) -> None:
    assert container_log_symlink(*args) == expected


def test_long_symlink_names_are_cut_to_ext4s_limit_keeping_the_suffix() -> None:
    # upstream legacy_test.go TestLogSymLink: 253-character pod name and namespace
    pod, namespace = "p" * 253, "n" * 63
    path = container_log_symlink("/var/log/containers", pod, namespace, "c", CID)
    name = path.rsplit("/", 1)[1]
    assert len(name.encode()) == 255
    assert name == f"{pod}_{namespace}_c-{CID}"[:251] + ".log"


def test_cutting_inside_a_multibyte_character_keeps_the_bytes_as_go_does() -> None:
    pod = "p" * 249 + "é"  # the 2-byte character straddles byte 251
    name = container_log_symlink("/d", pod, "n", "c", "abcdef").rsplit("/", 1)[1]
    assert name.encode("utf-8", "surrogateescape") == (pod.encode() + b"_n_c-abcdef")[:251] + b".log"


@pytest.mark.parametrize(("path", "container_id"), [
    (f"/var/log/containers/web-0_shop_nginx-{CID}.log", CID),
    ("/var/log/containers/p_ns_c-abcdef.log", "abcdef"),
    ("/var/log/containers/p_ns_c-abcde.log", None),  # shorter than 6 characters
    ("/var/log/containers/p_ns_c-abcdef.txt", None),
    ("/var/log/containers/pnsc.log", None),
])
def test_container_id_from_symlink(path: str, container_id: str | None) -> None:
    assert container_id_from_symlink(path) == container_id
