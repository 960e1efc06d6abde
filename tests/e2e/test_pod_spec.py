"""PodSpec breadth on the real stack, observed from inside the container (its id, env, /etc/hosts,
resolv.conf, capabilities, sysctls, cgroup limits) or through the pod's status and events."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from devstack.layout import Layout
from tests.conftest import Kubectl
from tests.e2e.conftest import Agent
from tests.e2e.test_pod_lifecycle import container, events, phase, pod_manifest, statuses, wait_gone, wait_pod


def message(pod: dict[str, Any], name: str = "main") -> str:
    return statuses(pod)[name]["state"]["terminated"].get("message", "")


def run_to_completion(admin: Kubectl, namespace: str, layout: Layout, name: str, script: str,
                      **spec: Any) -> dict[str, Any]:
    """A pod whose one container writes what it sees to its termination message and exits 0."""
    extra = spec.pop("container", {})
    admin.apply(pod_manifest(name, namespace, layout.node_name, [container("main", script, **extra)],
                             restartPolicy="Never", **spec))
    pod = wait_pod(admin, namespace, name, lambda p: p.get("status", {}).get("phase") in ("Succeeded", "Failed"),
                   what="finished")
    assert pod["status"]["phase"] == "Succeeded", json.dumps(pod["status"], indent=1)
    return pod


def waiting_reason(admin: Kubectl, namespace: str, name: str, reason: str, timeout: float = 60) -> dict[str, Any]:
    return wait_pod(admin, namespace, name,
                    lambda p: statuses(p).get("main", {}).get("state", {}).get("waiting", {}).get("reason") == reason,
                    timeout=timeout, what=f"waiting with {reason}")


# ------------------------------------------------------------------------------------------------ env


def test_env_sources_in_upstream_precedence(running_agent: Agent, admin: Kubectl, layout: Layout,
                                            namespace: str) -> None:
    admin.run("create", "configmap", "conf", "-n", namespace, "--from-literal=A=from-cm",
              "--from-literal=bad-name=x", "--from-literal=B=cm-b")
    admin.run("create", "service", "clusterip", "web", "-n", namespace, "--tcp=8080:80")
    env = [{"name": "B", "value": "env-b"},
           {"name": "COMPOSED", "value": "$(CFG_A)-$(B)"},
           {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
           {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
           {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
           {"name": "SA", "valueFrom": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}}}]
    # PID 1's environ is exactly what the runtime was given (a shell drops names like bad-name for children).
    script = ("tr '\\0' '\\n' < /proc/1/environ | "
              "grep -E '^(CFG_|B=|COMPOSED|MEM|POD_IP|NODE|SA|KUBERNETES_SERVICE_HOST|WEB_SERVICE_PORT)' "
              "| sort > /dev/termination-log")
    pod = run_to_completion(admin, namespace, layout, "envy", script, container={
        "env": env, "envFrom": [{"prefix": "CFG_", "configMapRef": {"name": "conf"}}],
        "resources": {"limits": {"memory": "32Mi"}}})
    seen = dict(line.split("=", 1) for line in message(pod).splitlines())
    assert seen["CFG_A"] == "from-cm" and seen["CFG_B"] == "cm-b" and seen["B"] == "env-b"
    assert seen["COMPOSED"] == "from-cm-env-b" and seen["MEM"] == "32"
    assert seen["POD_IP"] == pod["status"]["podIP"] and seen["NODE"] == layout.node_name and seen["SA"] == "default"
    assert seen["KUBERNETES_SERVICE_HOST"] == "10.96.0.1" and seen["WEB_SERVICE_PORT"] == "8080"
    # Upstream v1.37 takes every key (RelaxedEnvironmentVariableValidation is GA): no event, no skipping.
    assert seen["CFG_bad-name"] == "x"


def test_service_links_off_keeps_only_the_master_service(running_agent: Agent, admin: Kubectl, layout: Layout,
                                                         namespace: str) -> None:
    admin.run("create", "service", "clusterip", "web", "-n", namespace, "--tcp=8080:80")
    pod = run_to_completion(admin, namespace, layout, "nolinks",
                            "env | grep _SERVICE_HOST= | sort > /dev/termination-log", enableServiceLinks=False)
    assert message(pod).split() == ["KUBERNETES_SERVICE_HOST=10.96.0.1"]


# ------------------------------------------------------------------------------------ security context


def test_run_as_user_group_and_supplemental_groups(running_agent: Agent, admin: Kubectl, layout: Layout,
                                                   namespace: str) -> None:
    pod = run_to_completion(admin, namespace, layout, "ids", "id > /dev/termination-log", securityContext={
        "runAsUser": 1234, "runAsGroup": 2345, "supplementalGroups": [3456]})
    assert message(pod).strip() == "uid=1234 gid=2345 groups=2345,3456"


def test_run_as_non_root_refuses_a_root_image(running_agent: Agent, admin: Kubectl, layout: Layout,
                                              namespace: str) -> None:
    admin.apply(pod_manifest("rooty", namespace, layout.node_name, [container("main", "sleep 3600")],
                             securityContext={"runAsNonRoot": True}))
    pod = waiting_reason(admin, namespace, "rooty", "CreateContainerConfigError")
    assert statuses(pod)["main"]["state"]["waiting"]["message"] == \
        f'container has runAsNonRoot and image will run as root (pod: "rooty_{namespace}({pod["metadata"]["uid"]})", ' \
        "container: main)"


def test_fs_group_owns_the_volumes(running_agent: Agent, admin: Kubectl, layout: Layout, namespace: str) -> None:
    admin.run("create", "configmap", "conf", "-n", namespace, "--from-literal=k=v")
    script = ("touch /scratch/new; echo $(id -G) $(stat -c '%g %a' /scratch) $(stat -c %g /scratch/new) "
              "$(stat -L -c '%g %a' /conf/k) > /dev/termination-log")
    pod = run_to_completion(admin, namespace, layout, "grouped", script, securityContext={
        "runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 2000},
        volumes=[{"name": "scratch", "emptyDir": {}}, {"name": "conf", "configMap": {"name": "conf"}}],
        container={"volumeMounts": [{"name": "scratch", "mountPath": "/scratch"},
                                    {"name": "conf", "mountPath": "/conf"}]})
    # groups include fsGroup; emptyDir is group 2000, setgid (new files inherit it); the configMap file is
    # group-readable by 2000 (upstream SetVolumeOwnership)
    assert message(pod).split() == ["1000", "2000", "2000", "2777", "2000", "2000", "644"]


def test_capabilities_no_new_privs_read_only_root_and_seccomp(running_agent: Agent, admin: Kubectl, layout: Layout,
                                                              namespace: str) -> None:
    script = ("grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status | tr -s '\\t' ' ' > /dev/termination-log; "
              "touch /rootfs-write 2>/dev/null && echo writable >> /dev/termination-log || "
              "echo read-only >> /dev/termination-log")
    pod = run_to_completion(admin, namespace, layout, "locked", script, container={"securityContext": {
        "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}, "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True, "seccompProfile": {"type": "RuntimeDefault"}}})
    lines = message(pod).splitlines()
    assert lines == ["CapEff: 0000000000000400", "NoNewPrivs: 1", "Seccomp: 2", "read-only"], lines


def test_privileged_container_has_every_capability(running_agent: Agent, admin: Kubectl, layout: Layout,
                                                   namespace: str) -> None:
    pod = run_to_completion(admin, namespace, layout, "root-all",
                            "grep ^CapEff: /proc/self/status | cut -f2 > /dev/termination-log",
                            container={"securityContext": {"privileged": True}})
    assert int(message(pod).strip(), 16) >= 0x1FFFFFFFFF  # every capability of this kernel


def test_safe_sysctl_is_set_and_unsafe_one_refused(running_agent: Agent, admin: Kubectl, layout: Layout,
                                                   namespace: str) -> None:
    pod = run_to_completion(admin, namespace, layout, "tuned", "cat /proc/sys/net/ipv4/ip_local_port_range "
                            "> /dev/termination-log", securityContext={"sysctls": [
                                {"name": "net.ipv4.ip_local_port_range", "value": "30000 40000"}]})
    assert message(pod).split() == ["30000", "40000"]
    admin.apply(pod_manifest("unsafe", namespace, layout.node_name, [container("main", "sleep 3600")],
                             securityContext={"sysctls": [{"name": "kernel.msgmax", "value": "65536"}]}))
    pod = wait_pod(admin, namespace, "unsafe", phase("Failed"), what="rejected")
    assert pod["status"]["reason"] == "SysctlForbidden"


# --------------------------------------------------------------------------------------- host namespaces


def test_host_network_pid_and_ipc(running_agent: Agent, admin: Kubectl, layout: Layout, namespace: str) -> None:
    pod = run_to_completion(admin, namespace, layout, "hosty",
                            "echo $(hostname) $(cat /proc/1/comm) > /dev/termination-log",
                            hostNetwork=True, hostPID=True, hostIPC=True)
    host, init = message(pod).split()
    assert host == socket.gethostname()
    assert init == open("/proc/1/comm").read().strip()  # the host's init, not the pause process
    assert pod["status"]["podIP"] == pod["status"]["hostIP"]


def test_host_network_pod_sees_its_pod_ip_as_the_host_ip(running_agent: Agent, admin: Kubectl, layout: Layout,
                                                         namespace: str) -> None:
    # Upstream e2e "Downward API should provide host IP and pod IP as an env var if pod uses host network": the
    # kubelet's SyncPod hands the status's pod IPs (the node's, for the host network) to the env.
    env = [{"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}
           for name, path in (("HOST_IP", "status.hostIP"), ("POD_IP", "status.podIP"), ("POD_IPS", "status.podIPs"))]
    pod = run_to_completion(admin, namespace, layout, "hostnet-env",
                            'echo "${HOST_IP:?} ${POD_IP:?} ${POD_IPS:?}" > /dev/termination-log',
                            hostNetwork=True, container={"env": env})
    assert message(pod).split() == [pod["status"]["hostIP"]] * 3


# ------------------------------------------------------------------------------------------ names and DNS


def test_managed_etc_hosts_hostname_subdomain_and_aliases(running_agent: Agent, admin: Kubectl, layout: Layout,
                                                          namespace: str) -> None:
    pod = run_to_completion(admin, namespace, layout, "named", "hostname > /dev/termination-log; "
                            "cat /etc/hosts >> /dev/termination-log", hostname="box", subdomain="team",
                            hostAliases=[{"ip": "10.1.2.3", "hostnames": ["foo.local", "bar.local"]}])
    lines = message(pod).splitlines()
    assert lines[0] == "box"
    ip = pod["status"]["podIP"]
    assert f"{ip}\tbox.team.{namespace}.svc.cluster.local\tbox" in lines, lines
    assert "# Entries added by HostAliases." in lines and "10.1.2.3\tfoo.local\tbar.local" in lines, lines
    assert lines[1] == "# Kubernetes-managed hosts file."


def test_hostname_override_is_the_pods_hostname(running_agent: Agent, admin: Kubectl, layout: Layout,
                                               namespace: str) -> None:
    # Upstream e2e "Override hostname of Pod": spec.hostnameOverride (GA at v1.37) is the hostname as given, a DNS
    # subdomain, over hostname and subdomain, for the kernel and the managed /etc/hosts alike.
    pod = run_to_completion(admin, namespace, layout, "override", "echo $(hostname)';'$(hostname -f)';' "
                            "> /dev/termination-log", hostname="custom-host", subdomain="t",
                            hostnameOverride="override.example.host")
    assert message(pod).strip() == "override.example.host;override.example.host;"


def test_dns_policy_none_with_dns_config(running_agent: Agent, admin: Kubectl, layout: Layout, namespace: str) -> None:
    pod = run_to_completion(admin, namespace, layout, "dns", "cat /etc/resolv.conf > /dev/termination-log",
                            dnsPolicy="None", dnsConfig={"nameservers": ["10.0.0.53"], "searches": ["corp.example"],
                                                         "options": [{"name": "ndots", "value": "2"}]})
    assert message(pod).splitlines() == ["search corp.example", "nameserver 10.0.0.53", "options ndots:2"]


# ------------------------------------------------------------------------------------------------ resources


def test_limits_reach_the_cgroup_and_oom_score_follows_qos(running_agent: Agent, admin: Kubectl, layout: Layout,
                                                           namespace: str) -> None:
    script = ("if [ -f /sys/fs/cgroup/cpu.max ]; then cat /sys/fs/cgroup/cpu.max /sys/fs/cgroup/memory.max; "
              "else echo $(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us) $(cat /sys/fs/cgroup/cpu/cpu.cfs_period_us); "
              "cat /sys/fs/cgroup/memory/memory.limit_in_bytes; fi > /dev/termination-log; "
              "cat /proc/self/oom_score_adj >> /dev/termination-log")
    pod = run_to_completion(admin, namespace, layout, "limited", script, container={"resources": {
        "requests": {"cpu": "250m", "memory": "64Mi"}, "limits": {"cpu": "250m", "memory": "64Mi"}}})
    cpu, memory, oom = message(pod).splitlines()
    assert cpu.split() == ["25000", "100000"] and int(memory) == 64 * 1024 * 1024
    # Guaranteed asks for -997; with restrict_oom_score_adj (this VM needs it) containerd raises a score below
    # its own to its own.
    containerd = int((layout.pids / "containerd.pid").read_text())
    floor = int(open(f"/proc/{containerd}/oom_score_adj").read())
    assert int(oom) == max(-997, floor)
    pod = run_to_completion(admin, namespace, layout, "besteffort",
                            "cat /proc/self/oom_score_adj > /dev/termination-log")
    assert message(pod).strip() == "1000"


# ------------------------------------------------------------------------------------- termination, tty


def test_fallback_to_logs_on_error(running_agent: Agent, admin: Kubectl, layout: Layout, namespace: str) -> None:
    admin.apply(pod_manifest("fallback", namespace, layout.node_name, [container(
        "main", "echo first; echo last words; exit 2", terminationMessagePolicy="FallbackToLogsOnError")],
        restartPolicy="Never"))
    pod = wait_pod(admin, namespace, "fallback", phase("Failed"), what="Failed")
    assert message(pod) == "first\nlast words\n"


def test_tty_and_stdin(running_agent: Agent, admin: Kubectl, layout: Layout, namespace: str) -> None:
    pod = run_to_completion(admin, namespace, layout, "tty",
                            "test -t 0 && test -t 1 && echo tty > /dev/termination-log",
                            container={"tty": True, "stdin": True, "stdinOnce": True})
    assert message(pod).strip() == "tty"


# ------------------------------------------------------------------------------------------- runtime class


def test_runtime_class_selects_the_handler(running_agent: Agent, admin: Kubectl, layout: Layout,
                                           namespace: str) -> None:
    name = f"kopflet-{namespace}"
    admin.apply(json.dumps({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": name},
                            "handler": "runc"}))
    try:
        run_to_completion(admin, namespace, layout, "classy", "true", runtimeClassName=name)
    finally:
        admin.run("delete", "runtimeclass", name, "--wait=false")


def test_runtime_class_with_unknown_handler_fails_sandbox_creation(running_agent: Agent, admin: Kubectl,
                                                                   layout: Layout, namespace: str) -> None:
    name = f"kopflet-nope-{namespace}"
    admin.apply(json.dumps({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": name},
                            "handler": "nope"}))
    try:
        admin.apply(pod_manifest("nohandler", namespace, layout.node_name, [container("main", "sleep 3600")],
                                 runtimeClassName=name))
        deadline = time.monotonic() + 60
        failed: list[str] = []
        while time.monotonic() < deadline and not failed:
            failed = [e["message"] for e in events(admin, namespace, "nohandler")
                      if e["reason"] == "FailedCreatePodSandBox"]
            time.sleep(1)
        assert failed and failed[0].startswith("Failed to create pod sandbox: ") and "nope" in failed[0], failed
    finally:
        admin.run("delete", "runtimeclass", name, "--wait=false")


def test_missing_runtime_class_is_reported_by_name(running_agent: Agent, admin: Kubectl, layout: Layout,
                                                  namespace: str) -> None:
    """The class exists at admission (the apiserver checks) and is gone when the kubelet looks it up."""
    name = f"kopflet-gone-{namespace}"
    admin.apply(json.dumps({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": name},
                            "handler": "runc"}))
    body = json.loads(pod_manifest("orphaned", namespace, layout.node_name, [container("main", "sleep 3600")],
                                   runtimeClassName=name, schedulingGates=[{"name": "example.com/hold"}]))
    del body["spec"]["nodeName"]  # the scheduler binds it once the gate is gone
    admin.apply(json.dumps(body))
    admin.run("delete", "runtimeclass", name)
    admin.run("patch", "pod", "orphaned", "-n", namespace, "--type=json", "-p",
              '[{"op": "remove", "path": "/spec/schedulingGates"}]')
    deadline = time.monotonic() + 60
    failed: list[str] = []
    while time.monotonic() < deadline and not failed:
        failed = [e["message"] for e in events(admin, namespace, "orphaned") if e["reason"] == "FailedCreatePodSandBox"]
        time.sleep(1)
    assert failed == [f'Failed to create pod sandbox: runtimeclass.node.k8s.io "{name}" not found'], failed


# ------------------------------------------------------------------------------------------------ sidecars


def sidecar(name: str, script: str, **extra: Any) -> dict[str, Any]:
    return {**container(name, script, **extra), "restartPolicy": "Always"}


SHARED = {"volumeMounts": [{"name": "shared", "mountPath": "/shared"}]}
SHARED_VOLUME = [{"name": "shared", "emptyDir": {}}]


def test_sidecar_is_started_before_the_next_init_and_does_not_block_completion(
        running_agent: Agent, admin: Kubectl, layout: Layout, namespace: str) -> None:
    side = sidecar("side", "sleep 2; touch /shared/ready; trap 'exit 0' TERM; while true; do sleep 0.2; done",
                   startupProbe={"exec": {"command": ["test", "-f", "/shared/ready"]}, "periodSeconds": 1}, **SHARED)
    admin.apply(pod_manifest("sidecarred", namespace, layout.node_name,
                             [container("main", "echo done > /dev/termination-log", **SHARED)],
                             initContainers=[side, container("check", "test -f /shared/ready", **SHARED)],
                             volumes=SHARED_VOLUME, restartPolicy="Never"))
    pod = wait_pod(admin, namespace, "sidecarred",
                   lambda p: p.get("status", {}).get("phase") in ("Succeeded", "Failed"), what="finished", timeout=90)
    assert pod["status"]["phase"] == "Succeeded", json.dumps(pod["status"], indent=1)
    inits = statuses(pod, "initContainerStatuses")
    assert inits["check"]["state"]["terminated"]["exitCode"] == 0  # it ran after the sidecar had started
    assert "terminated" in inits["side"]["state"]  # stopped once the main container was done


def test_sidecar_restarts_under_restart_policy_never(running_agent: Agent, admin: Kubectl, layout: Layout,
                                                     namespace: str) -> None:
    admin.apply(pod_manifest("flaky-side", namespace, layout.node_name, [container("main", "sleep 3600")],
                             initContainers=[sidecar("side", "sleep 4; exit 1")], restartPolicy="Never"))
    pod = wait_pod(admin, namespace, "flaky-side",
                   lambda p: statuses(p, "initContainerStatuses").get("side", {}).get("restartCount", 0) >= 1,
                   what="the sidecar restarted", timeout=90)
    assert pod["status"]["phase"] == "Running"
    assert "running" in statuses(pod)["main"]["state"] and statuses(pod)["main"]["restartCount"] == 0


def test_sidecars_stop_after_the_main_containers(running_agent: Agent, admin: Kubectl, layout: Layout,
                                                 namespace: str, tmp_path: Path) -> None:
    record = tmp_path / "order.log"
    record.touch()
    mount = {"volumeMounts": [{"name": "rec", "mountPath": "/rec"}]}
    admin.apply(pod_manifest("ordered-stop", namespace, layout.node_name, [container(
        "main", "trap 'echo main >> /rec/order.log; exit 0' TERM; while true; do sleep 0.2; done", **mount)],
        initContainers=[sidecar(
            "side", "trap 'sleep 1; echo side >> /rec/order.log; exit 0' TERM; while true; do sleep 0.2; done",
            **mount)],
        volumes=[{"name": "rec", "hostPath": {"path": str(tmp_path), "type": "Directory"}}],
        terminationGracePeriodSeconds=20))
    wait_pod(admin, namespace, "ordered-stop", lambda p: "running" in statuses(p).get("main", {}).get("state", {}),
             what="running")
    admin.run("delete", "pod", "ordered-stop", "-n", namespace, "--wait=false")
    wait_gone(admin, namespace, "ordered-stop", timeout=40)
    assert record.read_text().split() == ["main", "side"]


# ------------------------------------------------------------------------------------ ephemeral containers


def test_ephemeral_debug_container_shares_the_targets_processes(running_agent: Agent, admin: Kubectl,
                                                                layout: Layout, namespace: str) -> None:
    admin.apply(pod_manifest("debugged", namespace, layout.node_name, [container("main", "sleep 3600")]))
    wait_pod(admin, namespace, "debugged", lambda p: "running" in statuses(p).get("main", {}).get("state", {}),
             what="running")
    admin.run("debug", "debugged", "-n", namespace, "--image=docker.io/library/busybox:1.36", "--container=dbg",
              "--target=main", "--", "sh", "-c", "ps -o args | grep -c '^sleep 3600'")
    pod = wait_pod(admin, namespace, "debugged", lambda p: "terminated" in statuses(
        p, "ephemeralContainerStatuses").get("dbg", {}).get("state", {}), what="the debug container ran")
    assert statuses(pod, "ephemeralContainerStatuses")["dbg"]["state"]["terminated"]["exitCode"] == 0
    assert admin.run("logs", "debugged", "-n", namespace, "-c", "dbg").stdout.strip() == "1"
    assert statuses(pod)["main"]["restartCount"] == 0 and "running" in statuses(pod)["main"]["state"]
    time.sleep(3)  # never restarted
    pod = admin.json("get", "pod", "debugged", "-n", namespace)
    assert statuses(pod, "ephemeralContainerStatuses")["dbg"].get("restartCount", 0) == 0


# ------------------------------------------------------------------------------------------- deadlines


def test_container_restart_policy_never_in_an_always_pod(running_agent: Agent, admin: Kubectl, layout: Layout,
                                                         namespace: str) -> None:
    # Upstream e2e "Container Restart Rules should restart container on container-level restart policy Never"
    # (ContainerRestartRules, beta and on at v1.37): the container's own Never overrides the pod's Always.
    admin.apply(pod_manifest("own-never", namespace, layout.node_name,
                             [container("main", "exit 1", restartPolicy="Never")], restartPolicy="Always"))
    pod = wait_pod(admin, namespace, "own-never", phase("Failed"), what="Failed", timeout=60)
    main = statuses(pod)["main"]
    assert main["restartCount"] == 0
    assert main["state"]["terminated"]["exitCode"] == 1 and main["state"]["terminated"]["reason"] == "Error"
    assert not any(e["reason"] == "BackOff" for e in events(admin, namespace, "own-never"))


def test_container_restart_rule_restarts_on_a_matching_exit_code(running_agent: Agent, admin: Kubectl,
                                                                 layout: Layout, namespace: str) -> None:
    # Upstream e2e "Container Restart Rules should restart container on rule match": in a Never pod, a rule
    # `Restart` on exit code In [42] restarts the container, with the usual crash-loop backoff; exit 1 matches
    # no rule and the container's own Never holds.
    def rules_container(code: int) -> dict[str, Any]:
        return container("main", f"exit {code}", restartPolicy="Never", restartPolicyRules=[
            {"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}}])

    admin.apply(pod_manifest("rule-match", namespace, layout.node_name, [rules_container(42)], restartPolicy="Never"))
    admin.apply(pod_manifest("rule-miss", namespace, layout.node_name, [rules_container(1)], restartPolicy="Never"))
    pod = wait_pod(admin, namespace, "rule-match", lambda p: statuses(p).get("main", {}).get("restartCount", 0) >= 2,
                   what="restarted twice", timeout=90)
    assert pod["status"]["phase"] == "Running"
    assert statuses(pod)["main"]["lastState"]["terminated"]["exitCode"] == 42
    missed = wait_pod(admin, namespace, "rule-miss", phase("Failed"), what="Failed", timeout=60)
    assert statuses(missed)["main"]["restartCount"] == 0


def test_restart_all_containers_rule_restarts_the_pod_in_place(running_agent: Agent, admin: Kubectl,
                                                               layout: Layout, namespace: str) -> None:
    # Upstream e2e "Pod Extended (RestartAllContainers)" (RestartAllContainersOnContainerExits, beta and on at
    # v1.37): exit 42 matches a RestartAllContainers rule, so every container is killed and removed and the pod
    # starts again from its init containers in the same sandbox, with AllContainersRestarting shown meanwhile.
    mount = [{"name": "work", "mountPath": "/mnt"}]
    source = container("source", "if [ -f /mnt/done ]; then sleep 3600; else touch /mnt/done; sleep 2; exit 42; fi",
                       volumeMounts=mount, restartPolicy="Never", restartPolicyRules=[
                           {"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [42]}}])
    admin.apply(pod_manifest(
        "reset", namespace, layout.node_name, [source, container("regular", "sleep 3600")],
        initContainers=[container("init", "true"), container("sidecar", "sleep 3600", restartPolicy="Always")],
        volumes=[{"name": "work", "emptyDir": {}}], restartPolicy="Never"))
    first = wait_pod(admin, namespace, "reset", lambda p: "running" in statuses(p).get("regular", {}).get("state", {}),
                     what="running")
    node = json.loads(admin.run("get", "node", layout.node_name, "-o", "json").stdout)
    assert "RestartAllContainersOnContainerExits" in node["status"].get("declaredFeatures", [])

    def restarted(p: dict[str, Any]) -> bool:
        every = {**statuses(p), **statuses(p, "initContainerStatuses")}
        return all(every.get(n, {}).get("restartCount", 0) >= 1 for n in ("init", "sidecar", "source", "regular")) \
            and all("running" in every[n]["state"] for n in ("sidecar", "source", "regular"))

    pod = wait_pod(admin, namespace, "reset", restarted, what="every container restarted", timeout=120)
    assert pod["status"]["phase"] == "Running"
    assert pod["status"]["podIP"] == first["status"]["podIP"]  # the sandbox is kept
    last = statuses(pod)["regular"]["lastState"]["terminated"]
    assert (last["reason"], last["exitCode"]) == ("RestartingAllContainers", 137)
    condition = next(c for c in pod["status"]["conditions"] if c["type"] == "AllContainersRestarting")
    assert condition["status"] == "False"


def test_active_deadline_fails_the_pod(running_agent: Agent, admin: Kubectl, layout: Layout, namespace: str) -> None:
    admin.apply(pod_manifest("deadline", namespace, layout.node_name, [container("main", "sleep 3600")],
                             activeDeadlineSeconds=4))
    pod = wait_pod(admin, namespace, "deadline", phase("Failed"), what="Failed", timeout=60)
    assert pod["status"]["reason"] == "DeadlineExceeded"
    assert pod["status"]["message"] == "Pod was active on the node longer than the specified deadline"
    assert "terminated" in statuses(pod)["main"]["state"]
    assert any(e["reason"] == "DeadlineExceeded" for e in events(admin, namespace, "deadline"))


def test_lowered_active_deadline_is_honoured(running_agent: Agent, admin: Kubectl, layout: Layout,
                                            namespace: str) -> None:
    admin.apply(pod_manifest("later", namespace, layout.node_name, [container("main", "sleep 3600")],
                             activeDeadlineSeconds=3600))
    wait_pod(admin, namespace, "later", lambda p: "running" in statuses(p).get("main", {}).get("state", {}),
             what="running")
    admin.run("patch", "pod", "later", "-n", namespace, "-p", '{"spec": {"activeDeadlineSeconds": 5}}')
    pod = wait_pod(admin, namespace, "later", phase("Failed"), what="Failed after the lowered deadline", timeout=60)
    assert pod["status"]["reason"] == "DeadlineExceeded"


# ---------------------------------------------------------------------------------------- pull secrets


def test_image_pull_secret_opens_a_private_registry(running_agent: Agent, admin: Kubectl, layout: Layout,
                                                    namespace: str) -> None:
    image = f"{layout.private_registry_addr}/private/busybox:1.36"
    admin.apply(pod_manifest("anonymous", namespace, layout.node_name, [container(
        "main", "true", image=image, imagePullPolicy="Always")], restartPolicy="Never"))
    pod = wait_pod(admin, namespace, "anonymous", lambda p: statuses(p).get("main", {}).get("state", {}).get(
        "waiting", {}).get("reason") in ("ErrImagePull", "ImagePullBackOff"), what="refused by the registry")
    assert "401 Unauthorized" in statuses(pod)["main"]["state"]["waiting"].get("message", "") or \
        any("401 Unauthorized" in e["message"] for e in events(admin, namespace, "anonymous"))
    admin.run("create", "secret", "docker-registry", "regcred", "-n", namespace,
              f"--docker-server={layout.private_registry_addr}", f"--docker-username={layout.private_registry_user}",
              f"--docker-password={layout.private_registry_password}")
    admin.apply(pod_manifest("authorized", namespace, layout.node_name, [container(
        "main", "true", image=image, imagePullPolicy="Always")], restartPolicy="Never",
        imagePullSecrets=[{"name": "regcred"}]))
    wait_pod(admin, namespace, "authorized", phase("Succeeded"), what="pulled with the secret and ran")
    # The private copy has the public image's digest, so containerd now lists both names for one image and reports
    # the first (sorted) name in container statuses: drop the private name, or a later run in this clone would see
    # 127.0.0.1:5001/private/busybox where it expects docker.io/library/busybox.
    ctr = ["ctr", "-a", str(layout.containerd_socket), "-n", "k8s.io", "images"]
    names = subprocess.run([*ctr, "ls", "-q"], check=True, capture_output=True, text=True, timeout=30).stdout.split()
    private = [n for n in names if n.startswith(image.rsplit(":", 1)[0])]  # the tag and its digest reference
    subprocess.run([*ctr, "rm", *private], check=True, capture_output=True, timeout=30)
