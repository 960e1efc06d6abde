"""protectKernelDefaults: upstream setupKernelTunables, the pure decision and the /proc/sys I/O (on a temp dir)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from kopflet.cm import kernel_tunables as kt
from kopflet.cm.cgroups import PodCgroups
from kopflet.cm.container_manager import (
    ContainerManager,
    KernelTunables,
    KernelTunablesError,
    running_in_user_namespace,
)

EXPECTED = dict(kt.DESIRED)
HOST_DEFAULTS = {  # a stock kernel's values
    "vm/overcommit_memory": 0, "vm/panic_on_oom": 0, "kernel/panic": 0, "kernel/panic_on_oops": 0,
    "kernel/keys/root_maxkeys": 200, "kernel/keys/root_maxbytes": 20000,
}


def test_the_desired_values_are_upstreams() -> None:
    assert kt.DESIRED == (
        ("vm/overcommit_memory", 1), ("vm/panic_on_oom", 0), ("kernel/panic", 10), ("kernel/panic_on_oops", 1),
        ("kernel/keys/root_maxkeys", 1000000), ("kernel/keys/root_maxbytes", 25000000))


@pytest.mark.parametrize(("current", "protect", "writes", "errors"), [
    pytest.param(EXPECTED, False, (), (), id="as expected: nothing to do"),
    pytest.param(EXPECTED, True, (), (), id="as expected, protected: nothing to do"),
    pytest.param(HOST_DEFAULTS, False,
                 (("vm/overcommit_memory", 1), ("kernel/panic", 10), ("kernel/panic_on_oops", 1),
                  ("kernel/keys/root_maxkeys", 1000000), ("kernel/keys/root_maxbytes", 25000000)), (),
                 id="modify: each that differs is set"),
    pytest.param(HOST_DEFAULTS, True, (),
                 ("invalid kernel flag: vm/overcommit_memory, expected value: 1, actual value: 0",
                  "invalid kernel flag: kernel/panic, expected value: 10, actual value: 0",
                  "invalid kernel flag: kernel/panic_on_oops, expected value: 1, actual value: 0",
                  "invalid kernel flag: kernel/keys/root_maxkeys, expected value: 1000000, actual value: 200",
                  "invalid kernel flag: kernel/keys/root_maxbytes, expected value: 25000000, actual value: 20000"),
                 id="protect: each that differs is an error"),
    pytest.param({**EXPECTED, "vm/panic_on_oom": 1}, True, (),
                 ("invalid kernel flag: vm/panic_on_oom, expected value: 0, actual value: 1",), id="panic on OOM"),
    pytest.param({**EXPECTED, "kernel/panic": "open /proc/sys/kernel/panic: permission denied",
                  "vm/overcommit_memory": 2}, False, (("vm/overcommit_memory", 1),),
                 ("open /proc/sys/kernel/panic: permission denied",), id="modify: a read error is an error"),
    pytest.param({**EXPECTED, "kernel/panic": 'strconv.Atoi: parsing "x": invalid syntax'}, True, (),
                 ('strconv.Atoi: parsing "x": invalid syntax',), id="protect: a read error is an error"),
])
def test_decide(current: dict[str, int | str], protect: bool, writes: tuple[tuple[str, int], ...],
                errors: tuple[str, ...]) -> None:
    assert kt.decide(current, protect) == kt.Decision(writes, errors)


@pytest.mark.parametrize(("text", "value"), [
    ("1\n", 1), (" 10 \n", 10), ("-1\n", -1), ("+3", 3), ("25000000\n", 25000000),
    ("", 'strconv.Atoi: parsing "": invalid syntax'), ("1 2\n", 'strconv.Atoi: parsing "1 2": invalid syntax'),
    ("\t1\n", 'strconv.Atoi: parsing "\\t1": invalid syntax'), ("1_0", 'strconv.Atoi: parsing "1_0": invalid syntax'),
    ("9223372036854775808", 'strconv.Atoi: parsing "9223372036854775808": value out of range'),
])
def test_parse_value(text: str, value: int | str) -> None:
    assert kt.parse_value(text) == value


@pytest.mark.parametrize(("errors", "text"), [
    (["a"], "a"), (["a", "b"], "[a, b]"), (["a", "a"], "a"), (["a", "b", "a"], "[a, b]"),
])
def test_aggregate(errors: list[str], text: str) -> None:
    assert kt.aggregate(errors) == text


# ------------------------------------------------------------------------------------------ the I/O, on a tree

def sysctl_tree(tmp_path: Path, values: dict[str, int | str]) -> Path:
    root = tmp_path / "sys"
    for name, value in values.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{value}\n")
    return root


def read_tree(root: Path) -> dict[str, str]:
    return {name: (root / name).read_text() for name, _ in kt.DESIRED}


def uid_map(tmp_path: Path, text: str) -> str:
    path = tmp_path / "uid_map"
    path.write_text(text)
    return str(path)


HOST_UID_MAP = "         0          0 4294967295\n"


def test_unprotected_sets_what_differs(tmp_path: Path) -> None:
    root = sysctl_tree(tmp_path, HOST_DEFAULTS)
    KernelTunables(protect=False, root=str(root)).setup()
    # Go writes no newline; vm/panic_on_oom was right already, and was not written.
    assert read_tree(root) == {**{name: str(value) for name, value in kt.DESIRED}, "vm/panic_on_oom": "0\n"}


def test_protected_refuses_and_writes_nothing(tmp_path: Path) -> None:
    root = sysctl_tree(tmp_path, {**EXPECTED, "kernel/panic_on_oops": 0})
    before = read_tree(root)
    with pytest.raises(KernelTunablesError) as info:
        KernelTunables(protect=True, root=str(root)).setup()
    assert str(info.value) == "invalid kernel flag: kernel/panic_on_oops, expected value: 1, actual value: 0"
    assert read_tree(root) == before


@pytest.mark.parametrize("protect", [False, True])
def test_expected_values_start_in_either_mode_untouched(tmp_path: Path, protect: bool) -> None:
    root = sysctl_tree(tmp_path, EXPECTED)
    (root / "kernel" / "panic").chmod(0o444)  # nothing is written: not even opened for writing
    KernelTunables(protect=protect, root=str(root)).setup()
    assert read_tree(root) == {name: f"{value}\n" for name, value in kt.DESIRED}


def test_a_missing_tunable_is_an_error_in_either_mode(tmp_path: Path) -> None:
    values = dict(EXPECTED)
    del values["kernel/keys/root_maxbytes"]
    root = sysctl_tree(tmp_path, values)
    for protect in (False, True):
        with pytest.raises(KernelTunablesError) as info:
            KernelTunables(protect=protect, root=str(root)).setup()
        assert str(info.value) == f"open {root}/kernel/keys/root_maxbytes: no such file or directory"


def test_an_unreadable_tunable_is_an_error_and_the_others_are_still_set(tmp_path: Path) -> None:
    root = sysctl_tree(tmp_path, {**EXPECTED, "kernel/panic": 0, "vm/overcommit_memory": 0})
    (root / "kernel" / "panic").unlink()
    (root / "kernel" / "panic").mkdir()  # os.ReadFile opens a directory, then fails to read it
    with pytest.raises(KernelTunablesError) as info:
        KernelTunables(protect=False, root=str(root), uid_map=uid_map(tmp_path, HOST_UID_MAP)).setup()
    assert str(info.value) == f"read {root}/kernel/panic: is a directory"
    assert (root / "vm" / "overcommit_memory").read_text() == "1"


def test_a_refused_write_in_a_user_namespace_is_only_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """upstream: KubeletInUserNamespace (on by default since 1.37) ignores a failed write when in a user
    namespace."""
    root = sysctl_tree(tmp_path, {**EXPECTED, "vm/overcommit_memory": 0, "kernel/panic": 0})
    refused = root / "kernel" / "panic"

    class Refusing(KernelTunables):
        def _write(self, sysctl: str, value: int) -> None:
            if sysctl == "kernel/panic":
                raise OSError(13, f"open {refused}: permission denied")
            super()._write(sysctl, value)

    caplog.set_level(logging.INFO, logger="kopflet.cm.container_manager")
    in_userns = uid_map(tmp_path, "0 100000 65536\n")
    Refusing(protect=False, root=str(root), uid_map=in_userns).setup()
    assert (root / "vm" / "overcommit_memory").read_text() == "1"
    assert "running in UserNS, ignoring" in caplog.text
    with pytest.raises(KernelTunablesError, match=f"^open {refused}: permission denied$"):
        Refusing(protect=False, root=str(root), uid_map=uid_map(tmp_path, HOST_UID_MAP)).setup()


@pytest.mark.parametrize(("text", "inside"), [
    (HOST_UID_MAP, False), ("0 0 4294967295\n", False), ("0 100000 65536\n", True),
    ("0 0 1000\n", True), ("0 0 4294967295\n1 1 1\n", True),
])
def test_running_in_user_namespace(tmp_path: Path, text: str, inside: bool) -> None:
    assert running_in_user_namespace(uid_map(tmp_path, text)) is inside
    assert running_in_user_namespace(str(tmp_path / "missing")) is False


async def test_the_container_manager_checks_them_before_any_cgroup(tmp_path: Path) -> None:
    root = sysctl_tree(tmp_path, HOST_DEFAULTS)
    cgroups = tmp_path / "cgroup"
    manager = ContainerManager(
        PodCgroups(str(cgroups), v2=True), capacity={}, system_reserved={}, kube_reserved={}, enforcement=(),
        hugepage_sizes=(), active_pods=list, node_event=lambda *_: None,
        kernel=KernelTunables(protect=True, root=str(root)))
    with pytest.raises(KernelTunablesError, match=r"^\[invalid kernel flag: vm/overcommit_memory, expected value: 1"):
        await manager.start()
    assert not cgroups.exists()
    await manager.close()
