"""NoSwap for containers: upstream kuberuntime_container_linux.go configureContainerSwapResources, with
memorySwap.swapBehavior "" or NoSwap (all kopflet takes), in generateLinuxContainerResources: at CreateContainer
and at each in-place resize's UpdateContainerResources.

- no swap controller: nothing set;
- cgroup v1 with memory.memsw.limit_in_bytes (ConfigureNoSwap): MemorySwapLimitInBytes = MemoryLimitInBytes;
- cgroup v2 with memory.swap.max in the kubelet's own cgroup (configureSwap(0)): Unified["memory.swap.max"] = "0".

The controller is found once at start (checkSwapControllerAvailability): `cgroups.swap_controller`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cri_client import types as cri
from kopflet.api.spec import Pod
from kopflet.cm import cgroups, helpers
from kopflet.cm.helpers import SwapController
from kopflet.container.podstate import RuntimePodStatus
from kopflet.container.sync_result import SyncResult
from kopflet.kuberuntime import container_config, reconciler
from tests.unit.test_cpu_quota_exclusive_cpus import (
    CAPACITY,
    MI,
    MIXED,
    RESIZED,
    UPDATES,
    admitted_syncer,
    make_pod,
    res,
)

LIMITED = make_pod(("app", res("500m", "64Mi")))
UNLIMITED = make_pod(("app", res("500m", "64Mi", limits=False)))


@pytest.mark.parametrize(("resources", "swap", "memsw", "unified"), [
    pytest.param(cri.LinuxContainerResources(memory_limit_in_bytes=64 * MI), SwapController.NONE, 0, {},
                 id="no controller: nothing"),
    pytest.param(cri.LinuxContainerResources(memory_limit_in_bytes=64 * MI), SwapController.V1, 64 * MI, {},
                 id="v1: memsw = memory"),
    pytest.param(cri.LinuxContainerResources(), SwapController.V1, 0, {}, id="v1 without a limit: 0, unset"),
    pytest.param(cri.LinuxContainerResources(memory_limit_in_bytes=64 * MI), SwapController.V2, 0,
                 {"memory.swap.max": "0"}, id="v2: swap.max 0"),
    pytest.param(cri.LinuxContainerResources(), SwapController.V2, 0, {"memory.swap.max": "0"},
                 id="v2 without a limit: still 0"),
    pytest.param(cri.LinuxContainerResources(unified={"memory.oom.group": "1"}), SwapController.V2, 0,
                 {"memory.oom.group": "1", "memory.swap.max": "0"}, id="v2: merged with the others"),
])
def test_configure_no_swap(resources: cri.LinuxContainerResources, swap: SwapController, memsw: int,
                           unified: dict[str, str]) -> None:
    result = container_config.configure_no_swap(resources, swap)
    assert (result.memory_swap_limit_in_bytes, dict(result.unified)) == (memsw, unified)
    assert result.memory_limit_in_bytes == resources.memory_limit_in_bytes


@pytest.mark.parametrize(("pod", "swap", "memsw", "swap_max"), [
    (LIMITED, SwapController.NONE, 0, None),
    (LIMITED, SwapController.V1, 64 * MI, None),
    (UNLIMITED, SwapController.V1, 0, None),
    (LIMITED, SwapController.V2, 0, "0"),
    (UNLIMITED, SwapController.V2, 0, "0"),
])
def test_linux_resources_and_the_container_config(pod: Pod, swap: SwapController, memsw: int,
                                                  swap_max: str | None) -> None:
    container = pod.spec.containers[0]
    linux = container_config.linux_resources(pod, container, memory_capacity=CAPACITY, swap=swap)
    assert (linux.memory_swap_limit_in_bytes, linux.unified.get("memory.swap.max")) == (memsw, swap_max)
    config = container_config.build_container_config(pod, container, restart_count=0, env=[], image_ref="i",
                                                     mounts=[], memory_capacity=CAPACITY, swap=swap)
    assert config.linux is not None and config.linux.resources == linux


def test_linux_resources_set_no_swap_by_default() -> None:
    """A caller that does not know the node's controller (tests, hollow nodes) sets nothing, as upstream without a
    swap controller."""
    linux = container_config.linux_resources(LIMITED, LIMITED.spec.containers[0], memory_capacity=CAPACITY)
    assert linux.memory_swap_limit_in_bytes == 0 and "memory.swap.max" not in linux.unified


@pytest.mark.parametrize(("text", "path"), [
    ("0::/system.slice/kopflet.service\n", "/system.slice/kopflet.service"),
    ("0::/\n", "/"),
    ("12:memory:/x\n11:cpu,cpuacct:/x\n0::/y\n", "/y"),  # hybrid: the unified line
    ("12:memory:/x\n1:name=systemd:/x\n", None),  # v1 only
    ("", None),
])
def test_unified_cgroup_path(text: str, path: str | None) -> None:
    assert helpers.unified_cgroup_path(text) == path


def _tree(tmp_path: Path, files: dict[str, str]) -> tuple[str, str]:
    for name, content in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    return str(tmp_path / "sys"), str(tmp_path / "proc")


@pytest.mark.parametrize(("files", "expected"), [
    pytest.param({"sys/memory/memory.memsw.limit_in_bytes": "9223372036854771712"}, SwapController.V1,
                 id="v1 with swap accounting"),
    pytest.param({"sys/memory/memory.limit_in_bytes": "9223372036854771712"}, SwapController.NONE,
                 id="v1 without swap accounting"),
    pytest.param({"sys/cgroup.controllers": "cpu memory", "proc/self/cgroup": "0::/kopflet\n",
                  "sys/kopflet/memory.swap.max": "max"}, SwapController.V2, id="v2: the agent's cgroup has it"),
    pytest.param({"sys/cgroup.controllers": "cpu memory", "proc/self/cgroup": "0::/\n"}, SwapController.NONE,
                 id="v2 in the root cgroup: none there"),
    pytest.param({"sys/cgroup.controllers": "cpu memory", "proc/self/cgroup": "0::/kopflet\n",
                  "sys/kopflet/memory.max": "max"}, SwapController.NONE, id="v2 without swap"),
    pytest.param({"sys/cgroup.controllers": "cpu memory"}, SwapController.NONE, id="v2, /proc unreadable"),
])
def test_swap_controller(tmp_path: Path, files: dict[str, str], expected: SwapController) -> None:
    """upstream checkSwapControllerAvailability: v1 looks at the memory hierarchy's root, v2 at the agent's own
    cgroup (/proc/self/cgroup); anything missing or unreadable is "not available"."""
    (tmp_path / "sys").mkdir(exist_ok=True)
    fs_root, proc_root = _tree(tmp_path, files)
    assert cgroups.swap_controller(fs_root, proc_root) == expected


@pytest.mark.parametrize("swap", [SwapController.V1, SwapController.V2])
async def test_the_syncer_creates_and_resizes_without_swap(tmp_path: Path, swap: SwapController) -> None:
    """The node's controller reaches CreateContainer and every UpdateContainerResources of a resize (upstream
    generates the whole LinuxContainerResources again there, swap included)."""
    syncer, fake, _ = await admitted_syncer(tmp_path, "none", MIXED)
    syncer.swap_controller = swap

    async def create_sandbox(*_: object) -> str:
        return "sb"

    syncer.create_sandbox = create_sandbox  # type: ignore[method-assign]
    actions = reconciler.PodActions(create_sandbox=True, containers_to_start=("pinned", "shared"))
    result = await syncer.sync(MIXED, RuntimePodStatus(uid="u"), actions)
    assert not result.sandbox_error and not result.waiting
    created = [c.linux.resources for c in fake.containers.created]  # type: ignore[union-attr]
    assert await syncer.ensure_pod_cgroup(MIXED, SyncResult())
    resized = SyncResult()
    await syncer.resize(RESIZED, RuntimePodStatus(uid="u"), UPDATES, resized)
    assert resized.resize_error == ""
    updated = [linux for _, linux in fake.containers.updated]
    assert len(created) == 2 and len(updated) == 3
    for linux in (*created, *updated):
        assert linux is not None
        if swap is SwapController.V1:
            assert linux.memory_swap_limit_in_bytes == linux.memory_limit_in_bytes > 0
        else:
            assert linux.unified.get("memory.swap.max") == "0" and linux.memory_swap_limit_in_bytes == 0
    assert {linux.memory_limit_in_bytes for linux in updated} == {128 * MI}  # the resized limit, swap following it
