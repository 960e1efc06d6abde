"""kopflet.kuberuntime.container_config: ContainerConfig (upstream generateContainerConfig) and the cgroup math.

One base pod; resource cases give requests/limits and state shares, quota and memory limit.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from cri_client import types as cri
from kopflet.api.spec import Pod, container_hash, pod_from_body
from kopflet.cm import helpers
from kopflet.kuberuntime import container_config
from kopflet.paths import Layout

GI = 2**30
CAPACITY = 8 * GI
HOST_USERNS = cri.UserNamespace(mode=cri.NamespaceMode.NODE)
POD_USERNS = cri.UserNamespace(mode=cri.NamespaceMode.POD,
                               uids=(cri.IDMapping(host_id=65536, container_id=0, length=65536),),
                               gids=(cri.IDMapping(host_id=65536, container_id=0, length=65536),))


def make_pod(container: dict[str, Any] | None = None, **spec: Any) -> Pod:
    return pod_from_body({
        "metadata": {"name": "web", "namespace": "shop", "uid": "uid-1"},
        "spec": {"containers": [{"name": "app", "image": "nginx:1.27", **(container or {})}], **spec},
    })


def test_build_container_config_for_the_base_pod() -> None:
    pod = make_pod({"command": ["sh", "-c", "echo $(GREETING) $$(HOME) $(MISSING)"], "args": ["--name=$(NAME)"],
                    "workingDir": "/srv", "tty": True, "stdin": True,
                    "resources": {"requests": {"cpu": "250m", "memory": "64Mi"},
                                  "limits": {"cpu": "500m", "memory": "128Mi"}}},
                   terminationGracePeriodSeconds=10)
    container = pod.spec.containers[0]
    mounts = (cri.Mount(container_path="/dev/termination-log", host_path="/var/lib/kopflet/uid-1/containers/app/x"),)
    config = container_config.build_container_config(
        pod, container, restart_count=3, env=[("GREETING", "hello"), ("NAME", "web")],
        image_ref="sha256:0123", memory_capacity=CAPACITY, mounts=mounts)
    assert config == cri.ContainerConfig(
        metadata=cri.ContainerMetadata(name="app", attempt=3),
        image="sha256:0123",
        user_specified_image="nginx:1.27",
        command=("sh", "-c", "echo hello $(HOME) $(MISSING)"),
        args=("--name=web",),
        working_dir="/srv",
        envs={"GREETING": "hello", "NAME": "web"},
        mounts=mounts,
        labels={"io.kubernetes.pod.name": "web", "io.kubernetes.pod.namespace": "shop",
                "io.kubernetes.pod.uid": "uid-1", "io.kubernetes.container.name": "app"},
        annotations={"io.kubernetes.container.hash": container_hash({"name": "app", "image": "nginx:1.27"}),
                     "io.kubernetes.container.restartCount": "3",
                     "io.kubernetes.container.terminationMessagePath": "/dev/termination-log",
                     "io.kubernetes.container.terminationMessagePolicy": "File",
                     "io.kubernetes.pod.terminationGracePeriod": "10",
                     "io.kubernetes.container.type": "container"},
        log_path="app/3.log",
        stdin=True,
        tty=True,
        linux=cri.LinuxContainerConfig(
            resources=cri.LinuxContainerResources(cpu_period=100000, cpu_quota=50000, cpu_shares=256,
                                                  memory_limit_in_bytes=128 * 2**20,
                                                  oom_score_adj=1000 - 1000 * 64 * 2**20 // CAPACITY),
            security_context=cri.ContainerSecurityContext(
                namespace_options=cri.NamespaceOptions(pid=cri.NamespaceMode.CONTAINER, userns_options=HOST_USERNS),
                masked_paths=container_config.DEFAULT_MASKED_PATHS,
                readonly_paths=container_config.DEFAULT_READONLY_PATHS,
                seccomp=cri.SecurityProfile(profile_type=cri.ProfileType.UNCONFINED)),
        ),
    )


def test_empty_command_and_args_mean_the_image_defaults() -> None:
    pod = make_pod()
    config = container_config.build_container_config(pod, pod.spec.containers[0], restart_count=0, env=[],
                                                     image_ref="sha256:0123", memory_capacity=CAPACITY)
    assert (config.command, config.args, config.log_path) == ((), (), "app/0.log")


RESOURCE_CASES: list[tuple[str, dict[str, Any], tuple[int, int, int]]] = [
    ("nothing set: minimum shares, no quota", {}, (2, 0, 0)),
    ("request 100m", {"requests": {"cpu": "100m"}}, (102, 0, 0)),
    ("request 1", {"requests": {"cpu": "1"}}, (1024, 0, 0)),
    ("request 1m: at least 2 shares", {"requests": {"cpu": "1m"}}, (2, 0, 0)),
    ("request 300 cores: at most 262144 shares", {"requests": {"cpu": "300"}}, (262144, 0, 0)),
    ("limit only: shares from the limit", {"limits": {"cpu": "500m"}}, (512, 50000, 0)),
    ("request and limit", {"requests": {"cpu": "250m"}, "limits": {"cpu": "2"}}, (256, 200000, 0)),
    ("explicit zero request keeps minimum shares", {"requests": {"cpu": "0"}, "limits": {"cpu": "1"}},
     (2, 100000, 0)),
    ("tiny limit: quota at least 1000", {"limits": {"cpu": "5m"}}, (5, 1000, 0)),
    ("memory limit", {"limits": {"memory": "128Mi"}}, (2, 0, 128 * 2**20)),
    ("memory limit rounds up", {"limits": {"memory": "1.5"}}, (2, 0, 2)),
]


@pytest.mark.parametrize(("resources", "expected"), [c[1:] for c in RESOURCE_CASES], ids=[c[0] for c in RESOURCE_CASES])
def test_linux_resources(resources: dict[str, Any], expected: tuple[int, int, int]) -> None:
    pod = make_pod({"resources": resources})
    result = container_config.linux_resources(pod, pod.spec.containers[0], memory_capacity=CAPACITY)
    assert (result.cpu_shares, result.cpu_quota, result.memory_limit_in_bytes) == expected
    assert result.cpu_period == 100000


@pytest.mark.parametrize(("resources", "expected"), [
    ({}, 1000),
    ({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}, -997),
    ({"requests": {"memory": "2Gi"}}, 750),
], ids=["BestEffort", "Guaranteed", "Burstable"])
def test_oom_score_adj_by_qos(resources: dict[str, Any], expected: int) -> None:
    pod = make_pod({"resources": resources})
    resources_ = container_config.linux_resources(pod, pod.spec.containers[0], memory_capacity=CAPACITY)
    assert resources_.oom_score_adj == expected


def test_cfs_quota_can_be_off_and_oom_group_on() -> None:
    pod = make_pod({"resources": {"limits": {"cpu": "1"}}})
    result = container_config.linux_resources(pod, pod.spec.containers[0], memory_capacity=CAPACITY,
                                              cpu_cfs_quota=False, memory_oom_group=True)
    assert (result.cpu_period, result.cpu_quota, result.unified) == (0, 0, {"memory.oom.group": "1"})


def test_security_context() -> None:
    pod = make_pod({"securityContext": {"privileged": True, "runAsUser": 1001, "readOnlyRootFilesystem": True,
                                        "allowPrivilegeEscalation": False,
                                        "capabilities": {"add": ["NET_ADMIN"], "drop": ["ALL"]},
                                        "seccompProfile": {"type": "RuntimeDefault"}}},
                   hostPID=True, hostNetwork=True,
                   securityContext={"runAsUser": 1000, "runAsGroup": 3000, "fsGroup": 2000,
                                    "seccompProfile": {"type": "Localhost", "localhostProfile": "p.json"}})
    assert container_config.container_security_context(pod, pod.spec.containers[0]) == cri.ContainerSecurityContext(
        capabilities=cri.Capabilities(add=("NET_ADMIN",), drop=("ALL",)),
        privileged=True,
        namespace_options=cri.NamespaceOptions(network=cri.NamespaceMode.NODE, pid=cri.NamespaceMode.NODE,
                                               userns_options=HOST_USERNS),
        run_as_user=1001,
        run_as_group=3000,
        readonly_rootfs=True,
        supplemental_groups=(2000,),
        no_new_privs=True,
        masked_paths=container_config.DEFAULT_MASKED_PATHS,  # privileged too: the runtime drops them
        readonly_paths=container_config.DEFAULT_READONLY_PATHS,
        seccomp=cri.SecurityProfile(profile_type=cri.ProfileType.RUNTIME_DEFAULT),
    )
    plain = make_pod(securityContext={"seccompProfile": {"type": "Localhost", "localhostProfile": "p.json"}})
    seccomp = container_config.container_security_context(plain, plain.spec.containers[0]).seccomp
    assert seccomp == cri.SecurityProfile(profile_type=cri.ProfileType.LOCALHOST,
                                          localhost_ref="/var/lib/kopflet/seccomp/p.json")


def test_log_paths() -> None:
    pod, layout = make_pod(), Layout("/var/lib/kopflet")
    ns, name, uid = pod.namespace, pod.name, pod.uid
    assert layout.pod_log_dir(ns, name, uid) == "/var/log/pods/shop_web_uid-1"
    assert layout.container_log_dir(ns, name, uid, "app") == "/var/log/pods/shop_web_uid-1/app"
    assert layout.container_log_path(ns, name, uid, "app", 2) == "/var/log/pods/shop_web_uid-1/app/2.log"
    assert layout.relative_log_path("app", 2) == "app/2.log"


def test_termination_message_mount() -> None:
    pod = make_pod({"terminationMessagePath": "/tmp/msg"})
    assert container_config.termination_message_mount(pod.spec.containers[0], "/var/lib/x/1234abcd") == cri.Mount(
        container_path="/tmp/msg", host_path="/var/lib/x/1234abcd")


@pytest.mark.parametrize(("container", "spec", "pod_ips", "expected"), [
    ({}, {}, ("10.0.0.5",), True),
    ({}, {}, (), False),                                   # no IP yet: no managed hosts file
    ({}, {"hostNetwork": True}, (), True),
    ({"volumeMounts": [{"name": "h", "mountPath": "/etc/hosts"}]}, {"volumes": [{"name": "h", "emptyDir": {}}]},
     ("10.0.0.5",), False),                                # the container brings its own
], ids=["pod IP", "no IP", "host network", "own /etc/hosts"])
def test_should_mount_etc_hosts(container: dict[str, Any], spec: dict[str, Any], pod_ips: tuple[str, ...],
                                expected: bool) -> None:
    pod = make_pod(container, **spec)
    assert container_config.should_mount_etc_hosts(pod, pod.spec.containers[0], pod_ips) is expected


def test_hosts_files() -> None:
    aliases = [{"ip": "127.0.0.1", "hostnames": ["foo.local", "bar.local"]}]
    assert container_config.managed_hosts_file(["10.0.0.5"], "web-0", "web.shop.svc.cluster.local", aliases) == (
        "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
        "fe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n"
        "10.0.0.5\tweb-0.web.shop.svc.cluster.local\tweb-0\n"
        "\n# Entries added by HostAliases.\n127.0.0.1\tfoo.local\tbar.local\n")
    short = container_config.managed_hosts_file(["10.0.0.5"], "web", "")
    assert short.endswith("fe00::2\tip6-allrouters\n10.0.0.5\tweb\n")
    assert container_config.node_hosts_file("127.0.0.1 localhost\n") == (
        "# Kubernetes-managed hosts file (host network).\n127.0.0.1 localhost\n")
    assert container_config.etc_hosts_mount("/p/etc-hosts") == cri.Mount(container_path="/etc/hosts",
                                                                           host_path="/p/etc-hosts",
                                                                           selinux_relabel=True)


# --------------------------------------------------------------------------- runAsNonRoot (verifyRunAsNonRoot)

WHERE = '(pod: "web_shop(uid-1)", container: app)'

RUN_AS_NON_ROOT_CASES: list[tuple[str, dict[str, Any], dict[str, Any], int | None, str, str | None]] = [
    ("not asked for", {}, {}, 0, "", None),
    ("runAsNonRoot false", {"runAsNonRoot": False}, {}, 0, "", None),
    ("container false overrides pod true", {"runAsNonRoot": False}, {"runAsNonRoot": True}, 0, "", None),
    ("explicit runAsUser 0", {"runAsNonRoot": True, "runAsUser": 0}, {}, 1000, "",
     f"container's runAsUser breaks non-root policy {WHERE}"),
    ("pod runAsUser 0 with container runAsNonRoot", {"runAsNonRoot": True}, {"runAsUser": 0}, 1000, "",
     f"container's runAsUser breaks non-root policy {WHERE}"),
    ("container runAsUser overrides the pod's 0", {"runAsUser": 1000}, {"runAsNonRoot": True, "runAsUser": 0}, 0, "",
     None),
    ("explicit non-root runAsUser wins over a root image", {"runAsNonRoot": True, "runAsUser": 1000}, {}, 0, "", None),
    ("image uid 0", {"runAsNonRoot": True}, {}, 0, "",
     f"container has runAsNonRoot and image will run as root {WHERE}"),
    ("pod-level runAsNonRoot, image uid 0", {}, {"runAsNonRoot": True}, 0, "",
     f"container has runAsNonRoot and image will run as root {WHERE}"),
    ("image uid 65532", {"runAsNonRoot": True}, {}, 65532, "", None),
    ("image without a user runs as root", {"runAsNonRoot": True}, {}, None, "",
     f"container has runAsNonRoot and image will run as root {WHERE}"),
    ("image with a user name", {"runAsNonRoot": True}, {}, None, "nginx",
     "container has runAsNonRoot and image has non-numeric user (nginx), cannot verify user is non-root " + WHERE),
    ("image uid out of range", {"runAsNonRoot": True}, {}, 2**31, "",
     "container has runAsNonRoot and image has an invalid user id (2147483648). (Must be 1-(2147483647)): "
     f"must be between 0 and 2147483647, inclusive {WHERE}"),
]


@pytest.mark.parametrize(("container_sc", "pod_sc", "image_uid", "image_user", "expected"),
                         [c[1:] for c in RUN_AS_NON_ROOT_CASES], ids=[c[0] for c in RUN_AS_NON_ROOT_CASES])
def test_verify_run_as_non_root(container_sc: dict[str, Any], pod_sc: dict[str, Any], image_uid: int | None,
                                image_user: str, expected: str | None) -> None:
    pod = make_pod({"securityContext": container_sc} if container_sc else {}, securityContext=pod_sc)
    assert container_config.verify_run_as_non_root(pod, pod.spec.containers[0], image_uid, image_user) == expected


# ------------------------------------------------------------------------------------ procMount, masked paths

DEFAULTS = container_config.DEFAULT_MASKED_PATHS, container_config.DEFAULT_READONLY_PATHS


@pytest.mark.parametrize(("security_context", "expected"), [
    ({}, DEFAULTS),
    ({"procMount": "Default"}, DEFAULTS),
    ({"procMount": "Unmasked"}, ((), ())),
    ({"privileged": True}, DEFAULTS),  # upstream sends them; the runtime ignores them for privileged containers
], ids=["unset", "Default", "Unmasked", "privileged"])
def test_proc_mount_paths(security_context: dict[str, Any], expected: tuple[tuple[str, ...], ...]) -> None:
    pod = make_pod({"securityContext": security_context}, hostUsers=False)  # as a runtime with user namespaces
    context = container_config.container_security_context(pod, pod.spec.containers[0], userns=POD_USERNS)
    assert (context.masked_paths, context.readonly_paths) == expected


def test_default_masked_and_readonly_paths_are_upstreams() -> None:
    assert container_config.DEFAULT_MASKED_PATHS == (
        "/proc/asound", "/proc/acpi", "/proc/interrupts", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
        "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware",
        "/sys/devices/virtual/powercap")
    assert container_config.DEFAULT_READONLY_PATHS == (
        "/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger")


def test_node_masked_paths_reach_the_config() -> None:
    pod = make_pod()
    node_paths = (*container_config.DEFAULT_MASKED_PATHS, *container_config.thermal_throttle_paths([0]))
    config = container_config.build_container_config(pod, pod.spec.containers[0], restart_count=0, env=[],
                                                     image_ref="sha256:0", memory_capacity=CAPACITY,
                                                     masked_paths=node_paths)
    assert config.linux is not None and config.linux.security_context is not None
    assert config.linux.security_context.masked_paths[-1] == "/sys/devices/system/cpu/cpu0/thermal_throttle"


# ---------------------------------------------------------------------------------------------------- seccomp

RD = cri.SecurityProfile(profile_type=cri.ProfileType.RUNTIME_DEFAULT)
UNCONFINED = cri.SecurityProfile(profile_type=cri.ProfileType.UNCONFINED)
ROOT = "/var/lib/kubelet/seccomp"


def localhost(path: str) -> cri.SecurityProfile:
    return cri.SecurityProfile(profile_type=cri.ProfileType.LOCALHOST, localhost_ref=path)


# (container seccompProfile, pod seccompProfile, seccompDefault, expected profile or error), as upstream
# TestGetSeccompProfile / TestGetSeccompProfileDefaultSeccomp (helpers_test.go).
SECCOMP_CASES: list[tuple[str, Any, Any, bool, cri.SecurityProfile | str]] = [
    ("nothing: Unconfined", None, None, False, UNCONFINED),
    ("nothing, seccompDefault: RuntimeDefault", None, None, True, RD),
    ("pod RuntimeDefault", None, {"type": "RuntimeDefault"}, False, RD),
    ("pod Unconfined", None, {"type": "Unconfined"}, False, UNCONFINED),
    ("pod Unconfined beats seccompDefault", None, {"type": "Unconfined"}, True, UNCONFINED),
    ("pod Localhost: under the root dir's seccomp/", None, {"type": "Localhost", "localhostProfile": "a/p.json"},
     False, localhost(f"{ROOT}/a/p.json")),
    ("container over pod", {"type": "Localhost", "localhostProfile": "c.json"}, {"type": "RuntimeDefault"}, False,
     localhost(f"{ROOT}/c.json")),
    ("container Unconfined over pod RuntimeDefault", {"type": "Unconfined"}, {"type": "RuntimeDefault"}, True,
     UNCONFINED),
    ("container RuntimeDefault", {"type": "RuntimeDefault"}, None, False, RD),
    ("Go filepath.Join cleans", None, {"type": "Localhost", "localhostProfile": "/x/./y//p.json"}, False,
     localhost(f"{ROOT}/x/y/p.json")),
    ("Localhost without a name", {"type": "Localhost"}, None, False,
     "localhostProfile must be set if seccompProfile type is Localhost."),
    ("Localhost with an empty name", None, {"type": "Localhost", "localhostProfile": ""}, True,
     "localhostProfile must be set if seccompProfile type is Localhost."),
]


@pytest.mark.parametrize(("container_profile", "pod_profile", "seccomp_default", "expected"),
                         [case[1:] for case in SECCOMP_CASES], ids=[case[0] for case in SECCOMP_CASES])
def test_seccomp_profile(container_profile: Any, pod_profile: Any, seccomp_default: bool,
                         expected: cri.SecurityProfile | str) -> None:
    pod = make_pod({"securityContext": {"seccompProfile": container_profile}} if container_profile else {},
                   securityContext={"seccompProfile": pod_profile} if pod_profile else {})
    container = pod.spec.containers[0]
    if isinstance(expected, str):
        with pytest.raises(container_config.ContainerConfigError, match=f"^{re.escape(expected)}$"):
            container_config.seccomp_profile(pod, container, profile_root=ROOT, seccomp_default=seccomp_default)
        return
    assert container_config.seccomp_profile(pod, container, profile_root=ROOT,
                                            seccomp_default=seccomp_default) == expected


def test_seccomp_root_and_default_reach_the_config() -> None:
    profile = {"type": "Localhost", "localhostProfile": "d.json"}
    pod = pod_from_body({"metadata": {"name": "web", "namespace": "shop", "uid": "uid-1"},
                         "spec": {"containers": [{"name": "app", "image": "nginx",
                                                  "securityContext": {"seccompProfile": profile}},
                                                 {"name": "side", "image": "nginx"}]}})
    configs = [container_config.build_container_config(pod, container, restart_count=0, env=[], image_ref="sha256:0",
                                                       memory_capacity=CAPACITY, seccomp_profile_root=ROOT,
                                                       seccomp_default=True) for container in pod.spec.containers]
    assert [c.linux.security_context.seccomp for c in configs if c.linux and c.linux.security_context] == [
        localhost(f"{ROOT}/d.json"), RD]


# --------------------------------------------------------------------------------------------------- AppArmor

AA_PREFIX = "container.apparmor.security.beta.kubernetes.io/"
AA_RD = (RD, "runtime/default")
AA_UNCONFINED = (UNCONFINED, "unconfined")

# (container appArmorProfile, annotations, pod appArmorProfile, expected (profile, deprecated string) or error), as
# upstream TestGetAppArmorProfile (helpers_test.go) and GetProfile's order: the container's field, its annotation,
# the pod's field.
APPARMOR_CASES: list[tuple[str, Any, dict[str, str], Any, tuple[cri.SecurityProfile | None, str] | str]] = [
    ("nothing", None, {}, None, (None, "")),
    ("container RuntimeDefault", {"type": "RuntimeDefault"}, {}, None, AA_RD),
    ("container Unconfined", {"type": "Unconfined"}, {}, None, AA_UNCONFINED),
    ("container Localhost", {"type": "Localhost", "localhostProfile": "k8s-deny"}, {}, None,
     (localhost("k8s-deny"), "localhost/k8s-deny")),
    ("pod Localhost", None, {}, {"type": "Localhost", "localhostProfile": "pod-prof"},
     (localhost("pod-prof"), "localhost/pod-prof")),
    ("container over pod", {"type": "Unconfined"}, {}, {"type": "RuntimeDefault"}, AA_UNCONFINED),
    ("annotation runtime/default", None, {AA_PREFIX + "app": "runtime/default"}, None, AA_RD),
    ("annotation localhost/", None, {AA_PREFIX + "app": "localhost/ann"}, None, (localhost("ann"), "localhost/ann")),
    ("annotation over pod", None, {AA_PREFIX + "app": "unconfined"}, {"type": "RuntimeDefault"}, AA_UNCONFINED),
    ("container over annotation", {"type": "RuntimeDefault"}, {AA_PREFIX + "app": "unconfined"}, None, AA_RD),
    ("another container's annotation", None, {AA_PREFIX + "other": "runtime/default"}, None, (None, "")),
    ("an unknown annotation value: the pod's", None, {AA_PREFIX + "app": "enforce"}, {"type": "Unconfined"},
     AA_UNCONFINED),
    ("Localhost without a name", {"type": "Localhost"}, {}, None, "missing localhost apparmor profile name"),
    ("unknown type", {"type": "Complain"}, {}, None, 'unknown apparmor profile type: "Complain"'),
]


@pytest.mark.parametrize(("container_profile", "annotations", "pod_profile", "expected"),
                         [case[1:] for case in APPARMOR_CASES], ids=[case[0] for case in APPARMOR_CASES])
def test_apparmor_profile(container_profile: Any, annotations: dict[str, str], pod_profile: Any,
                          expected: tuple[cri.SecurityProfile | None, str] | str) -> None:
    pod = pod_from_body({
        "metadata": {"name": "web", "namespace": "shop", "uid": "uid-1", "annotations": annotations},
        "spec": {"containers": [{"name": "app", "image": "nginx", **(
            {"securityContext": {"appArmorProfile": container_profile}} if container_profile else {})}],
                 **({"securityContext": {"appArmorProfile": pod_profile}} if pod_profile else {})}})
    container = pod.spec.containers[0]
    if isinstance(expected, str):
        with pytest.raises(container_config.ContainerConfigError, match=f"^{re.escape(expected)}$"):
            container_config.apparmor_profile(pod, container)
        return
    assert container_config.apparmor_profile(pod, container) == expected
    context = container_config.container_security_context(pod, container)
    assert (context.apparmor, context.apparmor_profile) == expected


# -------------------------------------------------------------------------------------------- user namespaces


@pytest.mark.parametrize(("host_users", "userns", "expected"), [
    (None, None, HOST_USERNS),
    (True, None, HOST_USERNS),
    (True, HOST_USERNS, HOST_USERNS),
    (False, POD_USERNS, POD_USERNS),
    (False, None, "can't set `spec.hostUsers: false`, runtime does not support user namespaces"),
], ids=["unset", "true", "true, the sandbox's", "false, the sandbox's", "false without the sandbox's"])
def test_containers_share_the_sandboxs_user_namespace(host_users: bool | None, userns: cri.UserNamespace | None,
                                                      expected: cri.UserNamespace | str) -> None:
    """Upstream determineEffectiveSecurityContext asks NamespacesForPod again; the answer is the sandbox's. A pod
    with hostUsers: false never gets the host's user namespace by default: no config at all."""
    pod = make_pod(**({} if host_users is None else {"hostUsers": host_users}))
    container = pod.spec.containers[0]
    if isinstance(expected, str):
        with pytest.raises(container_config.ContainerConfigError, match=re.escape(expected)):
            container_config.build_container_config(pod, container, restart_count=0, env=[], image_ref="sha256:0",
                                                    memory_capacity=CAPACITY, userns=userns)
        return
    config = container_config.build_container_config(pod, container, restart_count=0, env=[], image_ref="sha256:0",
                                                     memory_capacity=CAPACITY, userns=userns)
    assert config.linux is not None and config.linux.security_context is not None
    options = config.linux.security_context.namespace_options
    assert options is not None and options.userns_options == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("0-3\n", [0, 1, 2, 3]),
    ("0", [0]),
    ("0-1,4,6-7", [0, 1, 4, 6, 7]),
    ("", None),
    ("0-x", None),
])
def test_possible_cpus(text: str, expected: list[int] | None) -> None:
    assert container_config.possible_cpus(text) == expected


def test_thermal_throttle_paths() -> None:
    assert container_config.thermal_throttle_paths([0, 2]) == [
        "/sys/devices/system/cpu/cpu0/thermal_throttle", "/sys/devices/system/cpu/cpu2/thermal_throttle"]


# ------------------------------------------------------------------------------------------------ hugepages

MI, GI_ = 2**20, 2**30


def test_hugepage_page_sizes_from_sysfs_names() -> None:
    names = ["hugepages-2048kB", "hugepages-1048576kB", "hugepages-64kB", "hugepages-32768kB", "README",
             "hugepages-2048", "hugepages-xkB"]
    assert container_config.hugepage_page_sizes(names) == ("2MB", "1GB", "64KB", "32MB")


@pytest.mark.parametrize(("resource", "expected"), [
    ("hugepages-2Mi", "2MB"),
    ("hugepages-1Gi", "1GB"),
    ("hugepages-2048Ki", "2MB"),
    ("hugepages-64Ki", "64KB"),
    ("hugepages-1Ti", "1TB"),
    ("hugepages-3000", None),       # 3000 bytes: not a whole number of KB
    ("hugepages-bad", None),
    ("memory", None),
])
def test_hugepage_unit_size(resource: str, expected: str | None) -> None:
    assert helpers.hugepage_unit_size(resource) == expected


HugepageCase = tuple[str, dict[str, Any], dict[str, Any] | None, tuple[str, ...], tuple[tuple[str, int], ...]]
HUGEPAGE_CASES: list[HugepageCase] = [
    ("no page sizes on the node: nothing sent", {"limits": {"hugepages-2Mi": "4Mi"}}, None, (), ()),
    ("not requested: every size denied", {}, None, ("2MB", "1GB"), (("2MB", 0), ("1GB", 0))),
    ("2Mi limit", {"limits": {"hugepages-2Mi": "4Mi", "memory": "1Gi"}}, None, ("2MB", "1GB"),
     (("2MB", 4 * MI), ("1GB", 0))),
    ("both sizes", {"limits": {"hugepages-2Mi": "8Mi", "hugepages-1Gi": "2Gi"}}, None, ("2MB", "1GB"),
     (("2MB", 8 * MI), ("1GB", 2 * GI_))),
    ("requests alone are not read", {"requests": {"hugepages-2Mi": "4Mi"}}, None, ("2MB",), (("2MB", 0),)),
    ("a size the node lacks is dropped", {"limits": {"hugepages-1Gi": "1Gi"}}, None, ("2MB",), (("2MB", 0),)),
    ("pod-level limit applies", {}, {"limits": {"hugepages-2Mi": "6Mi", "memory": "1Gi"}}, ("2MB",),
     (("2MB", 6 * MI),)),
    ("the container's limit wins over the pod's", {"limits": {"hugepages-2Mi": "2Mi"}},
     {"limits": {"hugepages-2Mi": "6Mi", "hugepages-1Gi": "1Gi"}}, ("2MB", "1GB"), (("2MB", 2 * MI), ("1GB", GI_))),
]


@pytest.mark.parametrize(("resources", "pod_resources", "sizes", "expected"), [c[1:] for c in HUGEPAGE_CASES],
                         ids=[c[0] for c in HUGEPAGE_CASES])
def test_hugepage_limits(resources: dict[str, Any], pod_resources: dict[str, Any] | None, sizes: tuple[str, ...],
                         expected: tuple[tuple[str, int], ...]) -> None:
    pod = make_pod({"resources": resources}, **({"resources": pod_resources} if pod_resources else {}))
    result = container_config.linux_resources(pod, pod.spec.containers[0], memory_capacity=CAPACITY,
                                              hugepage_sizes=sizes)
    assert result.hugepage_limits == tuple(cri.HugepageLimit(page_size=s, limit=n) for s, n in expected)


def test_hugepage_sizes_reach_the_config() -> None:
    pod = make_pod({"resources": {"limits": {"hugepages-2Mi": "4Mi", "memory": "64Mi"}}})
    config = container_config.build_container_config(pod, pod.spec.containers[0], restart_count=0, env=[],
                                                     image_ref="sha256:0", memory_capacity=CAPACITY,
                                                     hugepage_sizes=("2MB", "1GB"))
    assert config.linux is not None and config.linux.resources is not None
    assert config.linux.resources.hugepage_limits == (cri.HugepageLimit(page_size="2MB", limit=4 * MI),
                                                      cri.HugepageLimit(page_size="1GB", limit=0))


# ------------------------------------------------------------------------------- ephemeral container target


@pytest.mark.parametrize(("spec", "target", "expected_pid", "expected_target"), [
    ({}, "c-target", cri.NamespaceMode.TARGET, "c-target"),
    ({}, "", cri.NamespaceMode.CONTAINER, ""),  # no targetContainerName: its own PID namespace
    ({"shareProcessNamespace": True}, "c-target", cri.NamespaceMode.POD, ""),  # already shares the pod's
    ({"hostPID": True}, "c-target", cri.NamespaceMode.NODE, ""),
], ids=["own pid namespace -> target's", "no target", "shared pid namespace", "host pid"])
def test_ephemeral_container_joins_its_targets_pid_namespace(spec: dict[str, Any], target: str,
                                                             expected_pid: cri.NamespaceMode,
                                                             expected_target: str) -> None:
    pod = make_pod(ephemeralContainers=[{"name": "debugger", "image": "busybox", "targetContainerName": "app"}],
                   **spec)
    debugger = pod.spec.ephemeral_containers[0]
    config = container_config.build_container_config(pod, debugger, restart_count=0, env=[], image_ref="sha256:0",
                                                     memory_capacity=CAPACITY, pid_target_id=target)
    assert config.linux is not None and config.linux.security_context is not None
    options = config.linux.security_context.namespace_options
    assert options is not None
    assert (options.pid, options.target_id) == (expected_pid, expected_target)
    assert config.labels["io.kubernetes.container.name"] == "debugger"
    assert config.annotations["io.kubernetes.container.type"] == "ephemeral"


MOUNTS = (cri.Mount(container_path="/data", host_path="/var/lib/kopflet/pods/u/volumes/kubernetes.io~empty-dir/d"),
          cri.Mount(container_path="/etc/hosts", host_path="/var/lib/kopflet/pods/u/etc-hosts", readonly=True))


@pytest.mark.parametrize(("host_users", "userns", "mapped"), [
    (None, None, False),
    (True, HOST_USERNS, False),
    (False, POD_USERNS, True),
], ids=["no user namespace given", "the host's", "the pod's own"])
def test_every_mount_is_idmapped_in_the_pods_user_namespace(host_users: bool | None,
                                                            userns: cri.UserNamespace | None, mapped: bool) -> None:
    """Upstream applyPlatformSpecificContainerConfig: each mount gets the sandbox's UID and GID mappings (none for
    the host's user namespace), so what the pod's root writes to a volume is owned by root on disk, not by its high
    host UID."""
    pod = make_pod(**({} if host_users is None else {"hostUsers": host_users}))
    config = container_config.build_container_config(pod, pod.spec.containers[0], restart_count=0, env=[],
                                                     image_ref="sha256:0", memory_capacity=CAPACITY, userns=userns,
                                                     mounts=MOUNTS)
    assert [(m.container_path, m.readonly) for m in config.mounts] == [("/data", False), ("/etc/hosts", True)]
    for m in config.mounts:
        assert (m.uid_mappings, m.gid_mappings) == ((POD_USERNS.uids, POD_USERNS.gids) if mapped else ((), ()))
