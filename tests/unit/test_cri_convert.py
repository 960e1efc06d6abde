"""
Round trips of `cri_client.convert`: types -> protobuf -> wire bytes -> protobuf -> types is lossless.

Pure tests, no runtime. Each case names a value and its pair of converters; the wire step proves the
messages are complete and serialisable. Separate cases pin what the runtime's sparse messages (unset
sub-messages, unknown enum numbers) turn into.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from cri_client import convert, types
from cri_client.proto import api_pb2 as pb

NS = types.NamespaceOptions(
    network=types.NamespaceMode.NODE, pid=types.NamespaceMode.CONTAINER, ipc=types.NamespaceMode.POD
)
SANDBOX_MD = types.PodSandboxMetadata(name="web-0", namespace="default", uid="1234-abcd", attempt=2)
CONTAINER_MD = types.ContainerMetadata(name="app", attempt=3)
RESOURCES = types.LinuxContainerResources(
    cpu_period=100_000,
    cpu_quota=50_000,
    cpu_shares=512,
    memory_limit_in_bytes=64 * 1024 * 1024,
    oom_score_adj=-997,
    cpuset_cpus="0-1",
    cpuset_mems="0",
    hugepage_limits=(types.HugepageLimit(page_size="2MB", limit=4 * 2**20), types.HugepageLimit(page_size="1GB")),
    unified={"memory.high": "60000000"},
    memory_swap_limit_in_bytes=64 * 1024 * 1024,
)
MOUNT = types.Mount(
    container_path="/data",
    host_path="/var/lib/kopflet/pods/x/volumes/data",
    readonly=True,
    selinux_relabel=True,
    propagation=types.MountPropagation.HOST_TO_CONTAINER,
    recursive_read_only=True,
)
IDMAPPED_MOUNT = types.Mount(
    container_path="/data",
    host_path="/var/lib/kopflet/pods/x/volumes/data",
    uid_mappings=(types.IDMapping(host_id=65536 * 3, container_id=0, length=65536),),
    gid_mappings=(types.IDMapping(host_id=65536 * 4, container_id=1, length=10),),
)
IMAGE_MOUNT = types.Mount(
    container_path="/volume",
    readonly=True,
    image=types.ImageSpec(image="sha256:kitten", annotations={"a": "b"},
                          user_specified_image="registry.k8s.io/e2e-test-images/kitten:1.8", runtime_handler="runc"),
    image_sub_path="etc",
)
SANDBOX_CONFIG_FULL = types.PodSandboxConfig(
    metadata=SANDBOX_MD,
    hostname="web-0",
    log_directory="/var/log/pods/default_web-0_1234-abcd",
    dns_config=types.DNSConfig(
        servers=("10.96.0.10",),
        searches=("default.svc.cluster.local", "svc.cluster.local"),
        options=("ndots:5",),
    ),
    port_mappings=(
        types.PortMapping(container_port=80, host_port=8080),
        types.PortMapping(container_port=53, host_port=5353, protocol=types.Protocol.UDP, host_ip="127.0.0.1"),
    ),
    labels={"io.kubernetes.pod.name": "web-0", "app": "web"},
    annotations={"kubernetes.io/config.seen": "2024-01-01T00:00:00Z"},
    linux=types.LinuxSandboxConfig(
        cgroup_parent="/kubepods/besteffort/pod1234-abcd",
        security_context=types.SandboxSecurityContext(
            namespace_options=NS,
            selinux_options=types.SELinuxOptions(user="u", role="r", type="t", level="s0"),
            run_as_user=0,  # zero is a value, not "unset": must survive the round trip
            run_as_group=1000,
            readonly_rootfs=True,
            supplemental_groups=(1, 2, 3),
            privileged=True,
            seccomp=types.SecurityProfile(profile_type=types.ProfileType.RUNTIME_DEFAULT),
            apparmor=types.SecurityProfile(profile_type=types.ProfileType.LOCALHOST, localhost_ref="k8s-prof"),
        ),
        sysctls={"net.ipv4.ip_unprivileged_port_start": "0"},
        # an empty overhead is sent as a message all the same (upstream's pointer to an empty struct); -1: no CFS
        # quota, as a pod with exclusive CPUs gets it
        overhead=types.LinuxContainerResources(),
        resources=types.LinuxContainerResources(cpu_shares=2048, cpu_period=100000, cpu_quota=-1,
                                                memory_limit_in_bytes=256 * 2**20),
    ),
)
CONTAINER_CONFIG_FULL = types.ContainerConfig(
    metadata=CONTAINER_MD,
    image="sha256:0123456789abcdef",
    user_specified_image="busybox:1.36",
    command=("/bin/sh", "-c"),
    args=("echo hello; sleep 3600",),
    working_dir="/work",
    envs={"A": "1", "UNICODE": "žluťoučký kůň", "EMPTY": ""},
    mounts=(MOUNT, types.Mount(container_path="/etc/hosts", host_path="/tmp/hosts")),
    labels={"io.kubernetes.container.name": "app"},
    annotations={"io.kubernetes.container.hash": "abc"},
    log_path="app/3.log",
    stdin=True,
    stdin_once=True,
    tty=True,
    devices=(types.Device(container_path="/dev/fake", host_path="/dev/null", permissions="rw"),),
    cdi_devices=("example.com/resource=CDI-Dev-1",),
    linux=types.LinuxContainerConfig(
        resources=RESOURCES,
        security_context=types.ContainerSecurityContext(
            capabilities=types.Capabilities(add=("NET_ADMIN",), drop=("ALL",), add_ambient=("NET_RAW",)),
            privileged=False,
            namespace_options=types.NamespaceOptions(pid=types.NamespaceMode.TARGET, target_id="c1"),
            selinux_options=types.SELinuxOptions(level="s0:c1,c2"),
            run_as_user=1000,
            run_as_group=0,
            run_as_username="nobody",
            readonly_rootfs=True,
            supplemental_groups=(10,),
            no_new_privs=True,
            masked_paths=("/proc/kcore",),
            readonly_paths=("/proc/sys",),
            seccomp=types.SecurityProfile(profile_type=types.ProfileType.UNCONFINED),
            apparmor=types.SecurityProfile(profile_type=types.ProfileType.RUNTIME_DEFAULT),
            apparmor_profile="runtime/default",
        ),
    ),
)

Case = tuple[Any, Callable[[Any], Any], Callable[[Any], Any]]

ROUND_TRIPS: dict[str, Case] = {
    "container-event": (
        types.ContainerEvent(container_id="c1", type=types.ContainerEventType.DELETED, created_at=1_700_000_000_000),
        convert.container_event_to_pb,
        convert.container_event_from_pb,
    ),
    "version": (
        types.Version(version="0.1.0", runtime_name="containerd", runtime_version="1.6.20", runtime_api_version="v1"),
        convert.version_to_pb,
        convert.version_from_pb,
    ),
    "runtime-status-empty": (
        types.RuntimeStatus(),
        convert.runtime_status_to_pb,
        convert.runtime_status_from_pb,
    ),
    "runtime-status": (
        types.RuntimeStatus(
            conditions=(
                types.RuntimeCondition(type=types.RUNTIME_READY, status=True),
                types.RuntimeCondition(
                    type=types.NETWORK_READY,
                    status=False,
                    reason="NetworkPluginNotReady",
                    message="cni plugin not initialized",
                ),
            ),
            handlers=(
                types.RuntimeHandler(name="", recursive_read_only_mounts=True),
                types.RuntimeHandler(name="runc", user_namespaces=True),
            ),
            info={"config": "{}"},
        ),
        convert.runtime_status_to_pb,
        convert.runtime_status_from_pb,
    ),
    "namespace-options-default": (
        types.NamespaceOptions(),
        convert.namespace_options_to_pb,
        convert.namespace_options_from_pb,
    ),
    "namespace-options": (NS, convert.namespace_options_to_pb, convert.namespace_options_from_pb),
    "namespace-options-host-userns": (
        types.NamespaceOptions(userns_options=types.UserNamespace(mode=types.NamespaceMode.NODE)),
        convert.namespace_options_to_pb,
        convert.namespace_options_from_pb,
    ),
    "namespace-options-pod-userns": (
        types.NamespaceOptions(userns_options=types.UserNamespace(
            mode=types.NamespaceMode.POD,
            uids=(types.IDMapping(host_id=65536, container_id=0, length=65536),),
            gids=(types.IDMapping(host_id=131072, container_id=0, length=65536),))),
        convert.namespace_options_to_pb,
        convert.namespace_options_from_pb,
    ),
    "resources": (RESOURCES, convert.linux_resources_to_pb, convert.linux_resources_from_pb),
    "mount": (MOUNT, convert.mount_to_pb, convert.mount_from_pb),
    "mount-idmapped": (IDMAPPED_MOUNT, convert.mount_to_pb, convert.mount_from_pb),
    "mount-image": (IMAGE_MOUNT, convert.mount_to_pb, convert.mount_from_pb),
    "sandbox-config-minimal": (
        types.PodSandboxConfig(metadata=types.PodSandboxMetadata(name="p")),
        convert.sandbox_config_to_pb,
        convert.sandbox_config_from_pb,
    ),
    "sandbox-config-empty-linux": (
        types.PodSandboxConfig(
            metadata=SANDBOX_MD,
            dns_config=types.DNSConfig(),
            linux=types.LinuxSandboxConfig(security_context=types.SandboxSecurityContext()),
        ),
        convert.sandbox_config_to_pb,
        convert.sandbox_config_from_pb,
    ),
    "sandbox-config-full": (
        SANDBOX_CONFIG_FULL,
        convert.sandbox_config_to_pb,
        convert.sandbox_config_from_pb,
    ),
    "sandbox-list-item": (
        types.PodSandbox(
            id="sb1",
            metadata=SANDBOX_MD,
            state=types.SandboxState.NOTREADY,
            created_at=1_700_000_000_123_456_789,
            labels={"a": "b"},
            annotations={"c": "d"},
            runtime_handler="runc",
        ),
        convert.sandbox_to_pb,
        convert.sandbox_from_pb,
    ),
    "sandbox-status-no-network": (
        types.PodSandboxStatus(id="sb1", metadata=SANDBOX_MD, state=types.SandboxState.NOTREADY),
        convert.sandbox_status_to_pb,
        convert.sandbox_status_from_pb,
    ),
    "sandbox-status-dual-stack": (
        types.PodSandboxStatus(
            id="sb1",
            metadata=SANDBOX_MD,
            state=types.SandboxState.READY,
            created_at=1_700_000_000_000_000_001,
            ip="10.88.0.5",
            additional_ips=("fd00::5", "10.99.0.5"),
            namespace_options=NS,
            labels={"a": "b"},
            annotations={"c": "d"},
            runtime_handler="runc",
        ),
        convert.sandbox_status_to_pb,
        convert.sandbox_status_from_pb,
    ),
    "sandbox-filter-empty": (
        types.PodSandboxFilter(),
        convert.sandbox_filter_to_pb,
        convert.sandbox_filter_from_pb,
    ),
    "sandbox-filter-ready": (
        # READY is enum number 0: the wrapper message keeps it distinct from "no state filter".
        types.PodSandboxFilter(id="sb", state=types.SandboxState.READY, label_selector={"k": "v"}),
        convert.sandbox_filter_to_pb,
        convert.sandbox_filter_from_pb,
    ),
    "container-config-minimal": (
        types.ContainerConfig(metadata=types.ContainerMetadata(name="c"), image="busybox"),
        convert.container_config_to_pb,
        convert.container_config_from_pb,
    ),
    "container-config-full": (
        CONTAINER_CONFIG_FULL,
        convert.container_config_to_pb,
        convert.container_config_from_pb,
    ),
    "container-config-linux-empty": (
        types.ContainerConfig(
            metadata=CONTAINER_MD,
            image="busybox",
            linux=types.LinuxContainerConfig(security_context=types.ContainerSecurityContext()),
        ),
        convert.container_config_to_pb,
        convert.container_config_from_pb,
    ),
    "container-list-item": (
        types.Container(
            id="c1",
            pod_sandbox_id="sb1",
            metadata=CONTAINER_MD,
            image="docker.io/library/busybox:1.36",
            user_specified_image="busybox:1.36",
            image_ref="sha256:abc",
            image_id="sha256:abc",
            state=types.ContainerState.RUNNING,
            created_at=5,
            labels={"a": "b"},
            annotations={"c": "d"},
        ),
        convert.container_to_pb,
        convert.container_from_pb,
    ),
    "container-status-exited": (
        types.ContainerStatus(
            id="c1",
            metadata=CONTAINER_MD,
            state=types.ContainerState.EXITED,
            created_at=1,
            started_at=2,
            finished_at=3,
            exit_code=137,
            image="docker.io/library/busybox:1.36",
            image_ref="docker.io/library/busybox@sha256:def",
            image_id="sha256:abc",
            reason="OOMKilled",
            message="out of memory",
            labels={"a": "b"},
            annotations={"c": "d"},
            mounts=(MOUNT,),
            log_path="/var/log/pods/x/app/3.log",
        ),
        convert.container_status_to_pb,
        convert.container_status_from_pb,
    ),
    "container-status-with-resources": (
        types.ContainerStatus(id="c1", state=types.ContainerState.RUNNING,
                              resources=types.LinuxContainerResources(cpu_period=100000, cpu_quota=50000,
                                                                      cpu_shares=512,
                                                                      memory_limit_in_bytes=64 << 20)),
        convert.container_status_to_pb,
        convert.container_status_from_pb,
    ),
    "container-status-negative-exit": (
        types.ContainerStatus(id="c1", state=types.ContainerState.EXITED, exit_code=-1),
        convert.container_status_to_pb,
        convert.container_status_from_pb,
    ),
    "container-filter": (
        types.ContainerFilter(
            id="c", state=types.ContainerState.CREATED, pod_sandbox_id="sb", label_selector={"k": "v"}
        ),
        convert.container_filter_to_pb,
        convert.container_filter_from_pb,
    ),
    "container-filter-empty": (
        types.ContainerFilter(),
        convert.container_filter_to_pb,
        convert.container_filter_from_pb,
    ),
    "exec-sync-result": (
        types.ExecSyncResult(stdout=b"out\n", stderr=b"\xff\xfe not utf-8", exit_code=3),
        convert.exec_sync_result_to_pb,
        convert.exec_sync_result_from_pb,
    ),
    "auth-config": (
        types.AuthConfig(
            username="u",
            password="p",
            auth="dTpw",
            server_address="127.0.0.1:5000",
            identity_token="i",
            registry_token="r",
        ),
        convert.auth_config_to_pb,
        convert.auth_config_from_pb,
    ),
    "image-root-uid": (
        types.Image(
            id="sha256:abc",
            repo_tags=("docker.io/library/busybox:1.36",),
            repo_digests=("docker.io/library/busybox@sha256:def",),
            size=4_400_000,
            uid=0,
            pinned=True,
        ),
        convert.image_to_pb,
        convert.image_from_pb,
    ),
    "image-username": (
        types.Image(id="sha256:abc", username="nobody"),
        convert.image_to_pb,
        convert.image_from_pb,
    ),
    "image-fs-info": (
        types.ImageFsInfo(
            image_filesystems=(
                types.FilesystemUsage(mountpoint="/var/lib/containerd", timestamp=9, used_bytes=0, inodes_used=12),
            ),
            container_filesystems=(types.FilesystemUsage(mountpoint="/x"),),
        ),
        convert.image_fs_info_to_pb,
        convert.image_fs_info_from_pb,
    ),
    # RuntimeConfig: systemd is the enum's zero, so only the linux section's presence tells it from "unset".
    "runtime-config-systemd": (
        types.RuntimeConfig(linux_cgroup_driver=types.CGROUP_DRIVER_SYSTEMD),
        convert.runtime_config_to_pb,
        convert.runtime_config_from_pb,
    ),
    "runtime-config-cgroupfs": (
        types.RuntimeConfig(linux_cgroup_driver=types.CGROUP_DRIVER_CGROUPFS),
        convert.runtime_config_to_pb,
        convert.runtime_config_from_pb,
    ),
    "runtime-config-no-linux": (types.RuntimeConfig(), convert.runtime_config_to_pb, convert.runtime_config_from_pb),
}


@pytest.mark.parametrize(("value", "to_pb", "from_pb"), ROUND_TRIPS.values(), ids=ROUND_TRIPS.keys())
def test_round_trip(value: Any, to_pb: Callable[[Any], Any], from_pb: Callable[[Any], Any]) -> None:
    message = to_pb(value)
    wire = type(message).FromString(message.SerializeToString())
    assert from_pb(wire) == value


def test_round_trips_cover_every_converter_pair() -> None:
    """A new `x_to_pb`/`x_from_pb` pair must get a case here (building blocks are covered via parents)."""
    covered = {fn.__name__ for _, to_pb, from_pb in ROUND_TRIPS.values() for fn in (to_pb, from_pb)}
    nested_only = {
        "security_profile",
        "selinux_options",
        "sandbox_metadata",
        "sandbox_security_context",
        "linux_sandbox_config",
        "dns_config",
        "port_mapping",
        "container_metadata",
        "capabilities",
        "container_security_context",
        "linux_container_config",
        "filesystem_usage",
        "image_spec",
        "user_namespace",
    }
    public = {name for name in dir(convert) if name.endswith(("_to_pb", "_from_pb")) and not name.startswith("_")}
    missing = {name for name in public - covered if name.rsplit("_", 2)[0] not in nested_only}
    assert not missing


# ------------------------------------------------------------------------- what sparse messages become


def test_empty_messages_become_defaults() -> None:
    assert convert.sandbox_status_from_pb(pb.PodSandboxStatus()) == types.PodSandboxStatus(id="")
    assert convert.container_status_from_pb(pb.ContainerStatus()) == types.ContainerStatus(id="")
    assert convert.image_from_pb(pb.Image()) == types.Image(id="")
    assert convert.runtime_status_from_pb(pb.StatusResponse()) == types.RuntimeStatus()


def test_unset_wrappers_are_none_and_zero_is_kept() -> None:
    sc = convert.container_security_context_from_pb(pb.LinuxContainerSecurityContext())
    assert sc.run_as_user is None and sc.run_as_group is None and sc.capabilities is None
    m = convert.container_security_context_to_pb(types.ContainerSecurityContext(run_as_user=0))
    assert m.HasField("run_as_user") and m.run_as_user.value == 0
    assert not m.HasField("run_as_group")


def test_unknown_enum_numbers_fall_back_safely() -> None:
    """A newer runtime may report states this client does not know: read them as the safe choice."""
    assert convert.container_status_from_pb(pb.ContainerStatus(state=42)).state is types.ContainerState.UNKNOWN
    assert convert.sandbox_status_from_pb(pb.PodSandboxStatus(state=42)).state is types.SandboxState.NOTREADY
    assert convert.mount_from_pb(pb.Mount(propagation=9)).propagation is types.MountPropagation.PRIVATE


def test_sandbox_status_ips_lists_primary_first() -> None:
    message = pb.PodSandboxStatus(
        id="sb", network=pb.PodSandboxNetworkStatus(ip="10.0.0.1", additional_ips=[pb.PodIP(ip="fd00::1")])
    )
    status = convert.sandbox_status_from_pb(message)
    assert status.ips == ("10.0.0.1", "fd00::1")
    assert types.PodSandboxStatus(id="x").ips == ()


def test_envs_are_sent_in_order_as_utf8() -> None:
    config = types.ContainerConfig(metadata=CONTAINER_MD, image="busybox", envs={"Z": "1", "A": "ž", "M": "$(Z)"})
    message = convert.container_config_to_pb(config)
    assert [(kv.key, kv.value) for kv in message.envs] == [("Z", b"1"), ("A", "ž".encode()), ("M", b"$(Z)")]


def test_image_spec_fields() -> None:
    config = types.ContainerConfig(metadata=CONTAINER_MD, image="sha256:abc", user_specified_image="busybox")
    message = convert.container_config_to_pb(config)
    assert message.image.image == "sha256:abc"
    assert message.image.user_specified_image == "busybox"


def test_runtime_status_readiness() -> None:
    ready = types.RuntimeCondition(type=types.RUNTIME_READY, status=True)
    net_down = types.RuntimeCondition(type=types.NETWORK_READY, status=False, reason="NetworkPluginNotReady")
    status = types.RuntimeStatus(conditions=(ready, net_down))
    assert status.runtime_ready and not status.network_ready
    assert status.condition(types.NETWORK_READY) == net_down
    assert not types.RuntimeStatus().runtime_ready


def test_auth_config_repr_hides_secrets() -> None:
    text = repr(types.AuthConfig(username="me", password="hunter2", auth="c2VjcmV0", identity_token="tok"))
    assert "me" in text and "hunter2" not in text and "c2VjcmV0" not in text and "tok" not in text


# ---------------------------------------------------------------------------------------------- stats

CPU = types.CpuUsage(timestamp=1_700_000_000_000_000_001, usage_core_nano_seconds=12_345_678_901, usage_nano_cores=0)
MEMORY = types.MemoryUsage(
    timestamp=1_700_000_000_000_000_002,
    working_set_bytes=4_096_000,
    available_bytes=0,  # zero is a measurement, not "unset"
    usage_bytes=8_192_000,
    rss_bytes=1_024_000,
    page_faults=1473,
    major_page_faults=2,
)
ETH0 = types.NetworkInterfaceUsage(name="eth0", rx_bytes=540, rx_errors=0, tx_bytes=382, tx_errors=1)
CONTAINER_STATS = types.ContainerStats(
    id="c1",
    metadata=CONTAINER_MD,
    labels={"io.kubernetes.container.name": "app", "io.kubernetes.pod.uid": "1234-abcd"},
    annotations={"io.kubernetes.container.hash": "abc"},
    cpu=CPU,
    memory=MEMORY,
    writable_layer=types.FilesystemUsage(mountpoint="/var/lib/containerd/overlayfs", timestamp=3, used_bytes=0),
    swap=types.SwapUsage(timestamp=4, swap_available_bytes=100, swap_usage_bytes=0),
)
SANDBOX_STATS = types.PodSandboxStats(
    id="sb1",
    metadata=SANDBOX_MD,
    labels={"io.kubernetes.pod.name": "web-0"},
    annotations={"a": "b"},
    linux=types.LinuxPodSandboxStats(
        cpu=CPU,
        memory=MEMORY,
        network=types.NetworkUsage(
            timestamp=5, default_interface=ETH0, interfaces=(types.NetworkInterfaceUsage(name="net1", rx_bytes=7),)
        ),
        process=types.ProcessUsage(timestamp=6, process_count=3),
        containers=(CONTAINER_STATS, types.ContainerStats(id="c2")),
    ),
)

STATS_ROUND_TRIPS: dict[str, Case] = {
    "cpu-usage": (CPU, convert.cpu_usage_to_pb, convert.cpu_usage_from_pb),
    "cpu-usage-unset": (types.CpuUsage(timestamp=1), convert.cpu_usage_to_pb, convert.cpu_usage_from_pb),
    "memory-usage": (MEMORY, convert.memory_usage_to_pb, convert.memory_usage_from_pb),
    "memory-usage-unset": (types.MemoryUsage(), convert.memory_usage_to_pb, convert.memory_usage_from_pb),
    "swap-usage": (
        types.SwapUsage(timestamp=1, swap_usage_bytes=0),
        convert.swap_usage_to_pb,
        convert.swap_usage_from_pb,
    ),
    "network-interface-usage": (ETH0, convert.network_interface_usage_to_pb, convert.network_interface_usage_from_pb),
    "network-usage-empty": (types.NetworkUsage(), convert.network_usage_to_pb, convert.network_usage_from_pb),
    "process-usage": (
        types.ProcessUsage(timestamp=1, process_count=0),
        convert.process_usage_to_pb,
        convert.process_usage_from_pb,
    ),
    "container-stats": (CONTAINER_STATS, convert.container_stats_to_pb, convert.container_stats_from_pb),
    "container-stats-bare": (
        types.ContainerStats(id="c"),
        convert.container_stats_to_pb,
        convert.container_stats_from_pb,
    ),
    "linux-sandbox-stats-empty": (
        types.LinuxPodSandboxStats(),
        convert.linux_sandbox_stats_to_pb,
        convert.linux_sandbox_stats_from_pb,
    ),
    "sandbox-stats": (SANDBOX_STATS, convert.sandbox_stats_to_pb, convert.sandbox_stats_from_pb),
    "sandbox-stats-bare": (types.PodSandboxStats(id="sb"), convert.sandbox_stats_to_pb, convert.sandbox_stats_from_pb),
    "container-stats-filter": (
        types.ContainerStatsFilter(id="c", pod_sandbox_id="sb", label_selector={"k": "v"}),
        convert.container_stats_filter_to_pb,
        convert.container_stats_filter_from_pb,
    ),
    "sandbox-stats-filter": (
        types.PodSandboxStatsFilter(id="sb", label_selector={"k": "v"}),
        convert.sandbox_stats_filter_to_pb,
        convert.sandbox_stats_filter_from_pb,
    ),
}
# Counted by test_round_trips_cover_every_converter_pair above, which reads ROUND_TRIPS when it runs.
ROUND_TRIPS.update(STATS_ROUND_TRIPS)


@pytest.mark.parametrize(("value", "to_pb", "from_pb"), STATS_ROUND_TRIPS.values(), ids=STATS_ROUND_TRIPS.keys())
def test_stats_round_trip(value: Any, to_pb: Callable[[Any], Any], from_pb: Callable[[Any], Any]) -> None:
    message = to_pb(value)
    wire = type(message).FromString(message.SerializeToString())
    assert from_pb(wire) == value


def test_runtime_stats_messages_as_containerd_sends_them() -> None:
    """containerd fills the wrappers it measures and leaves others unset; the attributes carry the labels."""
    message = pb.ContainerStats(
        attributes=pb.ContainerAttributes(
            id="c1", metadata=pb.ContainerMetadata(name="app", attempt=1), labels={"io.kubernetes.pod.name": "p"}
        ),
        cpu=pb.CpuUsage(timestamp=10, usage_core_nano_seconds=pb.UInt64Value(value=0)),
        memory=pb.MemoryUsage(timestamp=11, working_set_bytes=pb.UInt64Value(value=4096)),
    )
    stats = convert.container_stats_from_pb(message)
    assert stats.id == "c1" and stats.metadata == types.ContainerMetadata(name="app", attempt=1)
    assert stats.labels == {"io.kubernetes.pod.name": "p"}
    assert stats.cpu == types.CpuUsage(timestamp=10, usage_core_nano_seconds=0, usage_nano_cores=None)
    assert stats.memory is not None and stats.memory.working_set_bytes == 4096 and stats.memory.usage_bytes is None
    assert stats.writable_layer is None and stats.swap is None


def test_empty_stats_messages_become_defaults() -> None:
    assert convert.container_stats_from_pb(pb.ContainerStats()) == types.ContainerStats(id="")
    assert convert.sandbox_stats_from_pb(pb.PodSandboxStats()) == types.PodSandboxStats(id="")
    # A Windows-only answer has no Linux part: nothing to read, not an error.
    windows = pb.PodSandboxStats(attributes=pb.PodSandboxAttributes(id="w"), windows=pb.WindowsPodSandboxStats())
    assert convert.sandbox_stats_from_pb(windows) == types.PodSandboxStats(id="w")


def test_idmapped_mount_fields_on_the_wire() -> None:
    """The proto names them uidMappings/gidMappings (camelCase, fields 6 and 7), as upstream's
    applyPlatformSpecificContainerConfig fills them from the sandbox's user namespace."""
    message = convert.mount_to_pb(IDMAPPED_MOUNT)
    assert [(i.host_id, i.container_id, i.length) for i in message.uidMappings] == [(196608, 0, 65536)]
    assert [(i.host_id, i.container_id, i.length) for i in message.gidMappings] == [(262144, 1, 10)]
    assert not convert.mount_to_pb(MOUNT).uidMappings


def test_image_volume_mount_fields_on_the_wire() -> None:
    """An image volume's mount (upstream makeMounts: Image, ImageSubPath, no host path) carries its ImageSpec in
    field 9 and the sub path in field 10; a plain mount leaves the ImageSpec unset, as containerd checks it is
    nil before treating a mount as an image's."""
    message = convert.mount_to_pb(IMAGE_MOUNT)
    assert message.HasField("image") and message.image.image == "sha256:kitten"
    assert message.image.user_specified_image == "registry.k8s.io/e2e-test-images/kitten:1.8"
    assert (message.image_sub_path, message.host_path, message.readonly) == ("etc", "", True)
    assert not convert.mount_to_pb(MOUNT).HasField("image")
    assert convert.mount_from_pb(convert.mount_to_pb(MOUNT)).image is None
