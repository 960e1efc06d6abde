"""The user namespace manager on a temporary root directory: the per-pod files, restore, release, orphans."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from cri_client import types as cri
from kopflet import checkpointmanager
from kopflet.paths import Layout
from kopflet.userns import allocator, userns_manager
from kopflet.userns.allocator import UsernsError
from kopflet.userns.userns_manager import UsernsManager

U = 65536


def manager(root: Path, *, start: int = 0, max_pods: int = 110,
            mappings: tuple[int, int] | None = None) -> UsernsManager:
    return UsernsManager(Layout(str(root)), max_pods=max_pods, kubelet_mappings=mappings, start=lambda _n: start)


def first_id(userns: cri.UserNamespace) -> int:
    return userns.uids[0].host_id


def test_a_new_pod_gets_a_range_recorded_in_its_directory(tmp_path: Path) -> None:
    m = manager(tmp_path, start=4)
    userns = m.get_or_create("pod-a")
    assert userns == allocator.new_record(5 * U, U)  # slot 4 of the default range [65536, 2^32)
    path = tmp_path / "pods" / "pod-a" / "userns"
    assert json.loads(path.read_text()) == {"uidMappings": [{"hostId": 5 * U, "containerId": 0, "length": U}],
                                            "gidMappings": [{"hostId": 5 * U, "containerId": 0, "length": U}]}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # as upstream's file store's temporary file
    assert [p.name for p in path.parent.iterdir()] == ["userns"]  # no temporary file left
    assert m.get_or_create("pod-a") == userns  # asked again (every sync, every container): the same range


def test_two_pods_get_disjoint_ranges(tmp_path: Path) -> None:
    m = manager(tmp_path)
    a, b = m.get_or_create("pod-a"), m.get_or_create("pod-b")
    assert {first_id(a), first_id(b)} == {U, 2 * U}


def test_restored_at_start_from_the_pods_directories(tmp_path: Path) -> None:
    first = manager(tmp_path, start=7)
    recorded = first.get_or_create("pod-a")
    (tmp_path / "pods" / "no-userns").mkdir()  # a pod with the host's user namespace: no file
    again = manager(tmp_path, start=7)  # the agent restarted: the same slot would be picked next
    assert again.allocations.used_by == {"pod-a": 8 * U}
    assert again.get_or_create("pod-a") == recorded
    assert first_id(again.get_or_create("pod-b")) == 9 * U


def test_a_bad_file_stops_the_start_with_upstreams_words(tmp_path: Path) -> None:
    pod = tmp_path / "pods" / "pod-a"
    pod.mkdir(parents=True)
    (pod / "userns").write_text(json.dumps({"uidMappings": [], "gidMappings": []}))
    with pytest.raises(UsernsError) as error:
        manager(tmp_path)
    assert str(error.value) == ('record pod mappings for existing pod "pod-a": invalid user namespace '
                                'configuration: no more than one mapping allowed.')


def test_a_bad_file_met_later_fails_the_sandbox(tmp_path: Path) -> None:
    m = manager(tmp_path)
    pod = tmp_path / "pods" / "pod-a"
    pod.mkdir(parents=True)
    (pod / "userns").write_text("{")
    with pytest.raises(UsernsError, match=r"^user namespace: invalid user namespace mappings file: "):
        m.get_or_create("pod-a")


def test_no_free_range(tmp_path: Path) -> None:
    m = manager(tmp_path, max_pods=1, mappings=(U, U))
    m.get_or_create("pod-a")
    with pytest.raises(UsernsError) as error:
        m.get_or_create("pod-b")
    assert str(error.value) == "create user namespace: could not find an empty slot to allocate a user namespace"
    assert not (tmp_path / "pods" / "pod-b" / "userns").exists()


def test_a_failed_write_frees_the_range(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    m = manager(tmp_path)

    def mkstemp(**_kwargs: object) -> tuple[int, str]:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpointmanager.tempfile, "mkstemp", mkstemp)
    with pytest.raises(UsernsError) as error:
        m.get_or_create("pod-a")
    assert str(error.value) == "create user namespace: [Errno 28] No space left on device"
    assert m.allocations.used_by == {}


def test_an_unreadable_file_is_the_error(tmp_path: Path) -> None:
    m = manager(tmp_path)
    (tmp_path / "pods").mkdir()
    (tmp_path / "pods" / "pod-a").write_text("not a directory")
    with pytest.raises(UsernsError, match="Not a directory"):
        m.get_or_create("pod-a")
    assert m.allocations.used_by == {}


def test_release_frees_the_range_and_removes_the_file(tmp_path: Path) -> None:
    m = manager(tmp_path)
    m.get_or_create("pod-a")
    m.release("pod-a")
    assert m.allocations.used_by == {}
    assert not (tmp_path / "pods" / "pod-a" / "userns").exists()
    m.release("pod-a")  # twice, or a pod that never had one: nothing
    assert first_id(m.get_or_create("pod-b")) == U  # the range is given again


def test_cleanup_orphaned(tmp_path: Path) -> None:
    m = manager(tmp_path)
    for uid in ("known", "unknown", "gone"):
        m.get_or_create(uid)
    os.remove(tmp_path / "pods" / "gone" / "userns")
    (tmp_path / "pods" / "gone").rmdir()
    released = m.cleanup_orphaned({"known", "gone"}.__contains__)
    assert released == ["unknown", "gone"]
    assert set(m.allocations.used_by) == {"known"}
    assert not (tmp_path / "pods" / "unknown" / "userns").exists()
    assert (tmp_path / "pods" / "known" / "userns").exists()


def test_no_pods_directory_yet(tmp_path: Path) -> None:
    m = manager(tmp_path / "fresh")
    assert m.cleanup_orphaned(lambda _uid: False) == []


# ---------------------------------------------------------------------------------- getsubids

class FakeUser:
    pw_name = "kubelet"


@pytest.mark.parametrize(("user", "command", "outputs", "expected"), [
    (False, "/usr/bin/getsubids", {}, (U, 2**32 - U)),
    (True, None, {}, (U, 2**32 - U)),
    (True, "/usr/bin/getsubids", {"kubelet": "0: kubelet 65536 2147483648\n",
                                  "-g kubelet": "0: kubelet 65536 2147483648\n"}, (U, 2147483648)),
    (True, "/usr/bin/getsubids", {"kubelet": "0: kubelet 65536 2147483648\n", "-g kubelet": "0: kubelet 1 2\n"},
     'mismatched subuids and subgids for user "kubelet"'),
    (True, "/usr/bin/getsubids", {"-g kubelet": "0: kubelet 1 2\n"},
     'error retrieving additional uids for user "kubelet": '),
    (True, "/usr/bin/getsubids", {"kubelet": "0: kubelet 1 2\n"},
     'error retrieving additional gids for user "kubelet"'),
], ids=["no kubelet user", "no getsubids", "the kubelet user's range", "mismatched", "uids failed", "gids failed"])
def test_read_kubelet_mappings(monkeypatch: pytest.MonkeyPatch, user: bool, command: str | None,
                               outputs: dict[str, str], expected: tuple[int, int] | str) -> None:
    """Upstream getKubeletMappings: getsubids is asked only when a kubelet user exists."""
    def getpwnam(name: str) -> FakeUser:
        if not user or name != "kubelet":
            raise KeyError(name)
        return FakeUser()

    def run(args: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        assert args[0] == command and kwargs["timeout"] == userns_manager.GETSUBIDS_TIMEOUT
        key = " ".join(args[1:])
        if key not in outputs:
            raise subprocess.CalledProcessError(1, args)
        return subprocess.CompletedProcess(args, 0, stdout=outputs[key])

    monkeypatch.setattr(userns_manager.pwd, "getpwnam", getpwnam)
    monkeypatch.setattr(userns_manager.shutil, "which", lambda _name: command)
    monkeypatch.setattr(userns_manager.subprocess, "run", run)
    if isinstance(expected, str):
        with pytest.raises(UsernsError) as error:
            userns_manager.read_kubelet_mappings()
        assert str(error.value).startswith(expected)
    else:
        assert userns_manager.read_kubelet_mappings() == expected
