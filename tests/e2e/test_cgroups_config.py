"""cgroupRoot, cgroupsPerQOS and cgroupDriver on the real cgroups of this cgroup v1 host (upstream
container_manager_linux.go NewContainerManager, pod_container_manager_linux.go, qos_container_manager_linux.go,
server.go getCgroupDriverFromCRI).

DRAFT for the lead (written without the stack: not run yet). Each test starts an agent of its own with flags; the
stack's containerd is 1.x (no CRI RuntimeConfig), so the configured driver stands.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from devstack.layout import Layout
from tests.conftest import Kubectl
from tests.e2e.conftest import Agent, agent_with
from tests.e2e.test_pod_lifecycle import container, is_ready, phase, pod_manifest, wait_pod

pytestmark = pytest.mark.skipif(os.path.exists("/sys/fs/cgroup/cgroup.controllers"),
                                reason="reads the cgroup v1 hierarchy this machine has")

CGROUP = Path("/sys/fs/cgroup")
# upstream cgroupV1impl.Validate's hierarchies (hugetlb only where mounted), those this host mounts
VALIDATED = [c for c in ("cpu", "cpuacct", "cpuset", "memory", "systemd", "pids", "hugetlb") if (CGROUP / c).is_dir()]
running = contextlib.contextmanager(agent_with)


@contextlib.contextmanager
def custom_root(name: str) -> Iterator[str]:
    """``/<name>`` made in every hierarchy the kubelet checks (the operator's job upstream), removed afterwards with
    whatever the agent left under it (the pods are gone by then)."""
    made = []
    for controller in VALIDATED:
        directory = CGROUP / controller / name
        directory.mkdir(exist_ok=True)
        made.append(directory)
        if controller == "cpuset":  # an empty cpuset cannot hold tasks: give it its parent's
            for knob in ("cpuset.cpus", "cpuset.mems"):
                (directory / knob).write_text((CGROUP / "cpuset" / knob).read_text())
    try:
        yield f"/{name}"
    finally:
        for directory in made:
            for dirpath, _dirs, _files in sorted(os.walk(directory), key=lambda w: -len(w[0])):
                with contextlib.suppress(OSError):
                    os.rmdir(dirpath)


def read(controller: str, cgroup: str, name: str) -> str:
    return (CGROUP / controller / cgroup.strip("/") / name).read_text().strip()


def container_cgroup(admin: Kubectl, namespace: str, pod: str, controller: str = "memory") -> str:
    """The container's cgroup in one v1 hierarchy, from its own /proc/self/cgroup (cgroup v1 containers share the
    host's cgroup namespace: the paths are the host's)."""
    out = admin.run("exec", "-n", namespace, pod, "--", "cat", "/proc/self/cgroup").stdout
    for line in out.splitlines():
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return path
    raise AssertionError(f"no {controller} cgroup in {out!r}")


def test_cgroup_root_puts_kubepods_and_the_pods_under_it(admin: Kubectl, layout: Layout, namespace: str,
                                                         tmp_path: Path) -> None:
    """--cgroup-root=/kopflet-e2e-root: kubepods is /kopflet-e2e-root/kubepods (limits and tiers there), the pod's
    cgroup and its containers under it, and /kubepods is not touched."""
    with custom_root("kopflet-e2e-root") as root, running(layout, tmp_path, f"--cgroup-root={root}"):
        kubepods = f"{root}/kubepods"
        assert int(read("cpu", kubepods, "cpu.shares")) > 1024  # node allocatable's shares, not the default
        assert read("cpu", f"{kubepods}/besteffort", "cpu.shares") == "2"
        assert (CGROUP / "cpu" / kubepods.strip("/") / "burstable").is_dir()
        resources = {"requests": {"cpu": "100m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}}
        admin.apply(pod_manifest("rooted", namespace, layout.node_name,
                                 [container("main", "sleep 3600", resources=resources)],
                                 terminationGracePeriodSeconds=0))
        pod = wait_pod(admin, namespace, "rooted", is_ready, what="Ready")
        uid = pod["metadata"]["uid"]
        pod_cgroup = f"{kubepods}/burstable/pod{uid}"
        assert read("memory", pod_cgroup, "memory.limit_in_bytes") == str(64 * 2**20)
        assert read("cpu", pod_cgroup, "cpu.shares") == "102"
        path = container_cgroup(admin, namespace, "rooted")
        assert path.startswith(f"{pod_cgroup}/"), path  # the container nests under the pod cgroup
        assert not (CGROUP / "memory" / "kubepods" / "burstable" / f"pod{uid}").exists()
        admin.run("delete", "pod", "-n", namespace, "rooted", "--wait=true", "--timeout=60s")
        deadline = time.monotonic() + 30
        while (CGROUP / "memory" / pod_cgroup.strip("/")).exists():  # removed with the pod
            assert time.monotonic() < deadline, "the pod cgroup was not removed"
            time.sleep(1)


def test_a_missing_cgroup_root_stops_the_agent(layout: Layout, tmp_path: Path) -> None:
    """upstream NewContainerManager: "invalid configuration: cgroup [...] has some missing paths: ..."."""
    agent = Agent(layout, tmp_path / "agent.log", env={"KOPFLET_ARGS": "--cgroup-root=/kopflet-e2e-missing"})
    agent.start()
    try:
        agent.wait_for(r'invalid configuration: cgroup \["kopflet-e2e-missing"\] has some missing paths: ')
    finally:
        agent.stop()
    assert not any((CGROUP / c / "kopflet-e2e-missing").exists() for c in VALIDATED)


def test_without_cgroups_per_qos_pods_get_no_pod_cgroup(admin: Kubectl, layout: Layout, namespace: str,
                                                         tmp_path: Path) -> None:
    """--cgroups-per-qos=false --enforce-node-allocatable=none: no pod cgroup; the sandbox gets no cgroup parent,
    so containerd puts the containers where its default is (not under kubepods); limits still hold per container."""
    args = "--cgroups-per-qos=false --enforce-node-allocatable=none"
    with running(layout, tmp_path, args):
        resources = {"requests": {"cpu": "100m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}}
        admin.apply(pod_manifest("flat", namespace, layout.node_name,
                                 [container("main", "sleep 3600", resources=resources)],
                                 terminationGracePeriodSeconds=0))
        pod = wait_pod(admin, namespace, "flat", is_ready, what="Ready")
        uid = pod["metadata"]["uid"]
        for tier in ("", "burstable", "besteffort"):
            assert not (CGROUP / "memory" / "kubepods" / tier / f"pod{uid}").exists()
        path = container_cgroup(admin, namespace, "flat")
        assert "/kubepods" not in path and f"pod{uid}" not in path, path
        assert read("memory", path, "memory.limit_in_bytes") == str(64 * 2**20)  # the container's own limit


def test_cgroups_per_qos_off_with_pods_enforced_is_refused(layout: Layout, tmp_path: Path) -> None:
    """upstream ValidateKubeletConfiguration (enforceNodeAllocatable defaults to [pods])."""
    agent = Agent(layout, tmp_path / "agent.log", env={"KOPFLET_ARGS": "--cgroups-per-qos=false"})
    agent.start()
    try:
        agent.wait_for(r'invalid configuration: cgroupsPerQOS \(--cgroups-per-qos\) must be set to true when '
                       r'"pods" contained in enforceNodeAllocatable \(--enforce-node-allocatable\)')
    finally:
        agent.stop()


@pytest.mark.skipif(os.path.isdir("/run/systemd/system"), reason="this host runs systemd")
def test_the_systemd_driver_without_systemd_stops_the_agent(layout: Layout, tmp_path: Path) -> None:
    """PID 1 is not systemd here: the agent refuses the systemd driver (upstream's libcontainer refuses its first
    cgroup with this error and the kubelet exits); no kubepods.slice is made."""
    agent = Agent(layout, tmp_path / "agent.log", env={"KOPFLET_ARGS": "--cgroup-driver=systemd"})
    agent.start()
    try:
        agent.wait_for(r"Failed to start ContainerManager: systemd not running on this host, cannot use systemd "
                       r"cgroups manager")
    finally:
        agent.stop()
    assert not any((CGROUP / c / "kubepods.slice").exists() for c in VALIDATED)


def test_configz_shows_the_cgroup_settings(admin: Kubectl, layout: Layout, tmp_path: Path) -> None:
    """/configz has cgroupRoot, cgroupsPerQOS and cgroupDriver in v1beta1's order (cgroupDriver the configured
    one: containerd 1.x does not implement RuntimeConfig)."""
    with custom_root("kopflet-e2e-configz") as root, running(layout, tmp_path, f"--cgroup-root={root}"):
        raw = admin.run("get", "--raw", f"/api/v1/nodes/{layout.node_name}/proxy/configz").stdout
        config = json.loads(raw)["kubeletconfig"]
        assert (config["cgroupRoot"], config["cgroupsPerQOS"], config["cgroupDriver"]) == (root, True, "cgroupfs")
        keys = list(config)
        assert keys.index("cgroupRoot") < keys.index("cgroupsPerQOS") < keys.index("cgroupDriver") \
            < keys.index("cpuManagerPolicy")


def test_an_orphaned_pod_cgroup_is_destroyed_with_its_processes(layout: Layout, tmp_path: Path) -> None:
    # What a pod gone while no agent ran can leave: its cgroup under a QoS tier, with a process still in it (the
    # upstream kubelet's housekeeping, cleanupOrphanedPodCgroups, kills it and removes the cgroup).
    uid = f"{os.urandom(4).hex()}-orphan"
    controllers = [c for c in ("cpu", "memory", "pids") if (CGROUP / c).is_dir()]
    directories = [CGROUP / c / "kubepods" / "besteffort" / f"pod{uid}" for c in controllers]
    stray = subprocess.Popen(["sleep", "600"])
    try:
        with running(layout, tmp_path, "") as agent:
            for directory in directories:
                directory.mkdir(parents=True)
                (directory / "cgroup.procs").write_text(str(stray.pid))
            agent.wait_for(rf"orphaned pod {uid} found, removing pod cgroups", timeout=60)  # a 30 s round
            assert stray.wait(timeout=30) == -9
            deadline = time.monotonic() + 60  # removed once the process is gone: that round or the next
            while any(d.exists() for d in directories) and time.monotonic() < deadline:
                time.sleep(1)
            assert not [d for d in directories if d.exists()]
    finally:
        stray.kill()
        stray.wait()
        for directory in directories:
            with contextlib.suppress(OSError):
                directory.rmdir()


def test_a_finished_pods_cgroup_goes_with_its_volumes(admin: Kubectl, layout: Layout, namespace: str,
                                                      tmp_path: Path) -> None:
    # upstream SyncTerminatedPod: once a terminal pod's volumes are gone its pod cgroup is destroyed, while the Pod
    # object (and its dead container, for logs) stays
    with running(layout, tmp_path, ""):
        admin.apply(pod_manifest("done", namespace, layout.node_name, [container("main", "true")],
                                 restartPolicy="Never"))
        pod = wait_pod(admin, namespace, "done", phase("Succeeded"), what="Succeeded")
        cgroup = CGROUP / "memory" / "kubepods" / "besteffort" / f"pod{pod['metadata']['uid']}"
        deadline = time.monotonic() + 60
        while cgroup.exists() and time.monotonic() < deadline:
            time.sleep(1)
        assert not cgroup.exists()
        assert admin.run("logs", "-n", namespace, "done", check=False).returncode == 0
