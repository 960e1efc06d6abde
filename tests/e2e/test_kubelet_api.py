"""The kubelet HTTPS API on the real stack, through kubectl and the apiserver (which authenticates to the
agent with its kubelet client certificate and verifies the agent's serving certificate against the CA):
logs, exec, attach, port-forward, metrics and stats; and callers without rights refused."""

from __future__ import annotations

import json
import re
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from devstack.layout import Layout
from tests.conftest import Kubectl
from tests.e2e.conftest import Agent
from tests.e2e.test_pod_lifecycle import container, is_ready, phase, pod_manifest, statuses, wait_pod

AGNHOST = "registry.k8s.io/e2e-test-images/agnhost:2.66.1"
KUBELET = "https://127.0.0.1:10250"


def kubectl_proc(admin: Kubectl, *args: str, **kwargs: object) -> subprocess.Popen[str]:
    return subprocess.Popen([str(admin.binary), f"--kubeconfig={admin.kubeconfig}", *args], text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)  # type: ignore[call-overload]


def running(name: str = "main") -> Callable[[dict[str, Any]], bool]:
    return lambda p: "running" in statuses(p).get(name, {}).get("state", {})


@pytest.fixture(scope="module")
def chatty(running_agent: Agent, admin: Kubectl, layout: Layout) -> Iterator[str]:
    """A namespace with a pod that wrote five lines and keeps running."""
    ns = f"e2e-api-{int(time.time())}"
    admin.run("create", "namespace", ns)
    deadline = time.monotonic() + 60
    while admin.run("get", "serviceaccount", "default", "-n", ns, check=False).returncode != 0:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    admin.apply(pod_manifest("chatty", ns, layout.node_name, [container(
        "main", "for i in 1 2 3 4 5; do echo line$i; done; sleep 1; echo oops >&2; sleep 3600")]))
    wait_pod(admin, ns, "chatty", is_ready, what="Ready")
    yield ns
    admin.run("delete", "namespace", ns, "--wait=false")


def wait_logs(admin: Kubectl, ns: str, pod: str, *args: str, expect: str, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    out = ""
    while time.monotonic() < deadline:
        proc = admin.run("logs", pod, "-n", ns, *args, check=False)
        out = proc.stdout + proc.stderr
        if expect in out:
            return proc.stdout
        time.sleep(0.5)
    raise AssertionError(f"kubectl logs {pod} {' '.join(args)} never showed {expect!r}: {out}")


def test_logs_plain_tail_and_timestamps(chatty: str, admin: Kubectl) -> None:
    out = wait_logs(admin, chatty, "chatty", expect="oops")
    assert out.splitlines() == ["line1", "line2", "line3", "line4", "line5", "oops"]
    assert admin.run("logs", "chatty", "-n", chatty, "--tail=2").stdout.splitlines() == ["line5", "oops"]
    stamped = admin.run("logs", "chatty", "-n", chatty, "--timestamps", "--tail=1").stdout.strip()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z oops", stamped), stamped
    assert admin.run("logs", "chatty", "-n", chatty, "--limit-bytes=8").stdout == "line1\nli"


def test_logs_follow_until_the_container_exits(chatty: str, admin: Kubectl, layout: Layout) -> None:
    admin.apply(pod_manifest("ticker", chatty, layout.node_name, [container(
        "main", "for i in 1 2 3 4 5 6; do echo tick$i; sleep 0.5; done")], restartPolicy="Never"))
    wait_pod(admin, chatty, "ticker", running(), what="running")
    proc = kubectl_proc(admin, "logs", "-f", "ticker", "-n", chatty)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out.splitlines() == [f"tick{i}" for i in range(1, 7)]


def test_logs_previous_after_a_restart(chatty: str, admin: Kubectl, layout: Layout) -> None:
    admin.apply(pod_manifest("crashy", chatty, layout.node_name, [container(
        "main", "echo run-$(cat /proc/sys/kernel/random/uuid); sleep 8; exit 1")]))
    wait_pod(admin, chatty, "crashy", running(), what="running")
    fresh = admin.run("logs", "crashy", "-n", chatty, "--previous", check=False)
    assert fresh.returncode != 0
    assert 'previous terminated container "main" in pod "crashy" not found' in fresh.stderr, fresh.stderr
    pod = wait_pod(admin, chatty, "crashy", lambda p: statuses(p).get("main", {}).get("restartCount", 0) >= 1
                   and running()(p), what="restarted and running again", timeout=60)
    assert statuses(pod)["main"]["lastState"]["terminated"]["exitCode"] == 1
    out = wait_logs(admin, chatty, "crashy", "--previous", expect="run-")
    assert re.fullmatch(r"run-[0-9a-f-]{36}\n", out), out
    current = wait_logs(admin, chatty, "crashy", expect="run-")  # the running instance printed another id
    assert current != out and re.fullmatch(r"run-[0-9a-f-]{36}\n", current), (current, out)


def test_logs_of_a_waiting_container_explain_why(chatty: str, admin: Kubectl, layout: Layout) -> None:
    admin.apply(pod_manifest("noimage", chatty, layout.node_name,
                             [container("main", "true", image="docker.io/library/nonexistent:1")]))
    deadline = time.monotonic() + 60
    err = ""
    while time.monotonic() < deadline and "is waiting to start" not in err:
        err = admin.run("logs", "noimage", "-n", chatty, check=False).stderr
        time.sleep(1)
    assert re.search(r'container "main" in pod "noimage" is waiting to start: (image can\'t be pulled|trying and '
                     r"failing to pull image|ContainerCreating)", err), err


def test_exec_with_stdin_and_exit_codes(chatty: str, admin: Kubectl) -> None:
    echoed = admin.run("exec", "-i", "chatty", "-n", chatty, "--", "sh", "-c", "tr a-z A-Z", stdin="hello\n")
    assert echoed.stdout == "HELLO\n"
    failed = admin.run("exec", "chatty", "-n", chatty, "--", "sh", "-c", "echo to-err >&2; exit 3", check=False)
    assert failed.returncode == 3 and "to-err" in failed.stderr
    missing = admin.run("exec", "chatty", "-n", chatty, "-c", "nope", "--", "true", check=False)
    assert missing.returncode != 0 and "nope" in missing.stderr


def test_attach_sends_stdin_to_the_container(chatty: str, admin: Kubectl, layout: Layout) -> None:
    admin.apply(pod_manifest("listener", chatty, layout.node_name, [container(
        "main", "while read line; do echo got:$line; done", stdin=True)]))
    wait_pod(admin, chatty, "listener", running(), what="running")
    proc = kubectl_proc(admin, "attach", "-i", "listener", "-n", chatty, "-c", "main", stdin=subprocess.PIPE)
    try:
        assert proc.stdin is not None
        proc.stdin.write("ping\n")
        proc.stdin.flush()
        wait_logs(admin, chatty, "listener", expect="got:ping")
    finally:
        proc.kill()
        proc.communicate()


def test_port_forward_reaches_a_server_in_the_pod(chatty: str, admin: Kubectl, layout: Layout) -> None:
    admin.apply(pod_manifest("server", chatty, layout.node_name, [
        {"name": "main", "image": AGNHOST, "args": ["netexec", "--http-port=8080"],
         "readinessProbe": {"httpGet": {"port": 8080, "path": "/healthz"}, "periodSeconds": 1}}]))
    wait_pod(admin, chatty, "server", is_ready, what="Ready")
    proc = kubectl_proc(admin, "port-forward", "pod/server", ":8080", "-n", chatty)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = re.search(r"Forwarding from 127\.0\.0\.1:(\d+) -> 8080", line)
        assert match, line + (proc.stderr.read() if proc.poll() is not None and proc.stderr else "")
        for _ in range(2):  # two requests: two streams over the one forwarding connection
            with urllib.request.urlopen(f"http://127.0.0.1:{match.group(1)}/hostname", timeout=10) as resp:
                assert resp.read().decode() == "server"
    finally:
        proc.kill()
        proc.communicate()


# ------------------------------------------------------------------------------------ authn and authz


def kubelet_get(path: str, *, token: str | None = None, cert: tuple[Path, Path] | None = None) -> tuple[int, str]:
    ctx = ssl.create_default_context(cafile=None)
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    if cert:
        ctx.load_cert_chain(*cert)
    req = urllib.request.Request(KUBELET + path, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_anonymous_and_unauthorized_callers_are_refused(chatty: str, admin: Kubectl, layout: Layout) -> None:
    assert kubelet_get("/pods") == (401, "Unauthorized")
    assert kubelet_get("/pods", token="not-a-token")[0] == 401
    token = admin.run("create", "token", "default", "-n", chatty).stdout.strip()
    code, body = kubelet_get("/pods", token=token)
    assert code == 403
    assert body.startswith(f"Forbidden (user=system:serviceaccount:{chatty}:default, verb=get, resource=nodes, "
                           "subresource(s)=[pods proxy])"), body
    code, body = kubelet_get("/pods", cert=(layout.pki / "admin.crt", layout.pki / "admin.key"))
    assert code == 200 and any(p["metadata"]["name"] == "chatty" for p in json.loads(body)["items"])


def test_the_serving_certificate_is_verified_by_the_apiserver(chatty: str, admin: Kubectl, layout: Layout) -> None:
    """The apiserver runs with --kubelet-certificate-authority: a reply at all means the cert checked out."""
    assert admin.raw(f"/api/v1/nodes/{layout.node_name}/proxy/healthz").stdout == "ok"
    node = admin.json("get", "node", layout.node_name)
    assert node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] == 10250


# ------------------------------------------------------------------------------------ metrics and stats


def test_metrics_parse_and_carry_upstream_names(chatty: str, admin: Kubectl, layout: Layout) -> None:
    text = admin.raw(f"/api/v1/nodes/{layout.node_name}/proxy/metrics").stdout
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name in ("kubelet_running_pods", "kubelet_running_containers", "kubelet_pod_start_duration_seconds",
                 "kubelet_pod_worker_duration_seconds", "kubelet_runtime_operations",
                 "kubelet_runtime_operations_duration_seconds", "kubelet_pleg_relist_duration_seconds"):
        assert name in families, sorted(families)
    assert sum(s.value for s in families["kubelet_running_pods"].samples) >= 1
    operations = {s.labels["operation_type"] for s in families["kubelet_runtime_operations"].samples}
    assert {"run_podsandbox", "create_container", "start_container"} <= operations, operations


def test_resource_metrics_and_stats_summary(chatty: str, admin: Kubectl, layout: Layout) -> None:
    text = admin.raw(f"/api/v1/nodes/{layout.node_name}/proxy/metrics/resource").stdout
    samples = [s for f in text_string_to_metric_families(text) for s in f.samples]
    names = {s.name for s in samples}
    assert {"node_cpu_usage_seconds_total", "node_memory_working_set_bytes", "container_cpu_usage_seconds_total",
            "container_memory_working_set_bytes", "pod_cpu_usage_seconds_total"} <= names, names
    assert any(s.name == "container_memory_working_set_bytes" and s.labels.get("pod") == "chatty"
               and s.labels.get("namespace") == chatty and s.value > 0 for s in samples)
    summary = json.loads(admin.raw(f"/api/v1/nodes/{layout.node_name}/proxy/stats/summary").stdout)
    assert summary["node"]["nodeName"] == layout.node_name
    assert summary["node"]["cpu"]["usageCoreNanoSeconds"] > 0 and summary["node"]["memory"]["workingSetBytes"] > 0
    pod = next(p for p in summary["pods"] if p["podRef"]["name"] == "chatty" and p["podRef"]["namespace"] == chatty)
    assert pod["containers"][0]["name"] == "main" and pod["containers"][0]["memory"]["workingSetBytes"] > 0
    # The pod's own numbers, from its pod cgroup and its pause container's network namespace, as cAdvisor reads them
    assert pod["cpu"]["usageCoreNanoSeconds"] > 0 and pod["memory"]["workingSetBytes"] > 0, pod
    assert pod["memory"]["workingSetBytes"] >= pod["containers"][0]["memory"]["workingSetBytes"], pod
    assert pod["network"]["name"] == "eth0" and pod["network"]["rxBytes"] >= 0, pod
    assert [i["name"] for i in pod["network"]["interfaces"]] == ["eth0"], pod
    assert pod["process_stats"]["process_count"] >= 2, pod  # pause and main, at least


def test_stats_summary_reports_each_volume(chatty: str, admin: Kubectl, layout: Layout) -> None:
    """Upstream's volume stats (MetricsDu): used bytes and inodes from du, capacity from the volume's filesystem;
    a Memory emptyDir is its own tmpfs, and hostPath has no metrics."""
    mib = 1 << 20
    admin.run("create", "configmap", "settings", "-n", chatty, "--from-literal=key=value")
    admin.apply(pod_manifest("volumes", chatty, layout.node_name, [container(
        "main", "dd if=/dev/zero of=/scratch/data bs=1M count=20 && dd if=/dev/zero of=/ram/data bs=1M count=8 "
                "&& sync && touch /tmp/ready && sleep 3600",
        volumeMounts=[{"name": "scratch", "mountPath": "/scratch"}, {"name": "ram", "mountPath": "/ram"},
                      {"name": "settings", "mountPath": "/settings"}, {"name": "host", "mountPath": "/host"}],
        readinessProbe={"exec": {"command": ["cat", "/tmp/ready"]}, "periodSeconds": 1})],
        volumes=[{"name": "scratch", "emptyDir": {}},
                 {"name": "ram", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}},
                 {"name": "settings", "configMap": {"name": "settings"}},
                 {"name": "host", "hostPath": {"path": "/tmp"}}]))
    wait_pod(admin, chatty, "volumes", is_ready, what="Ready")
    deadline = time.monotonic() + 150  # measured in the background and reused for a minute, as upstream's cache
    while True:
        summary = json.loads(admin.raw(f"/api/v1/nodes/{layout.node_name}/proxy/stats/summary").stdout)
        pod = next(p for p in summary["pods"] if p["podRef"]["name"] == "volumes")
        volumes = {v["name"]: v for v in pod.get("volume", [])}
        if volumes.get("scratch", {}).get("usedBytes", 0) >= 20 * mib and \
                volumes.get("ram", {}).get("usedBytes", 0) >= 8 * mib:
            break
        assert time.monotonic() < deadline, f"volume stats never showed the written data: {pod.get('volume')}"
        time.sleep(5)
    assert set(volumes) == {"scratch", "ram", "settings"}, "hostPath has no metrics upstream"
    scratch, ram = volumes["scratch"], volumes["ram"]
    assert set(scratch) == {"time", "availableBytes", "capacityBytes", "usedBytes", "inodesFree", "inodes",
                            "inodesUsed", "name"}, scratch
    assert scratch["capacityBytes"] == summary["node"]["fs"]["capacityBytes"]
    assert 0 < scratch["availableBytes"] <= scratch["capacityBytes"] and scratch["inodesUsed"] >= 2
    assert ram["capacityBytes"] == 64 * mib, "a Memory emptyDir is its own tmpfs of sizeLimit"
    assert volumes["settings"]["usedBytes"] > 0
    # Local ephemeral volumes first (upstream makePodStorageStats): the disk emptyDir and the configMap.
    assert {v["name"] for v in pod["volume"][:2]} == {"scratch", "settings"}
    # The pod's ephemeral storage counts the disk emptyDir, never the tmpfs.
    assert 20 * mib <= pod["ephemeral-storage"]["usedBytes"] < 28 * mib


def test_configz_shows_the_effective_configuration(chatty: str, admin: Kubectl, layout: Layout) -> None:
    body = json.loads(admin.raw(f"/api/v1/nodes/{layout.node_name}/proxy/configz").stdout)
    config = body["kubeletconfig"]
    assert (config["kind"], config["apiVersion"]) == ("KubeletConfiguration", "kubelet.config.k8s.io/v1beta1")
    assert config["containerRuntimeEndpoint"] == layout.runtime_endpoint
    assert config["authentication"]["webhook"]["enabled"] is True
    assert config["evictionHard"]["memory.available"] == "100Mi"


def handshake(version: ssl.TLSVersion) -> bool:
    """Whether the kubelet API completes a TLS handshake offering only `version`."""
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    ctx.minimum_version = ctx.maximum_version = version
    try:
        with socket.create_connection(("127.0.0.1", 10250), timeout=10) as raw, ctx.wrap_socket(raw):
            return True
    except ssl.SSLError:
        return False


def test_the_api_speaks_tls_1_2_and_up_by_default(chatty: str) -> None:
    assert handshake(ssl.TLSVersion.TLSv1_2) and handshake(ssl.TLSVersion.TLSv1_3)


def test_cadvisor_metrics_carry_the_series_dashboards_query(chatty: str, admin: Kubectl, layout: Layout) -> None:
    text = admin.raw(f"/api/v1/nodes/{layout.node_name}/proxy/metrics/cadvisor").stdout
    samples = [s for f in text_string_to_metric_families(text) for s in f.samples]
    mine = [s for s in samples if s.labels.get("pod") == "chatty" and s.labels.get("namespace") == chatty
            and s.labels.get("container") == "main"]
    names = {s.name for s in mine}
    assert {"container_cpu_usage_seconds_total", "container_memory_working_set_bytes", "container_memory_rss",
            "container_start_time_seconds"} <= names, names
    working_set = next(s for s in mine if s.name == "container_memory_working_set_bytes")
    assert working_set.value > 0
    assert working_set.labels["image"] and working_set.labels["name"] and working_set.labels["id"]
    # The same container in /stats/summary: its id is the runtime's container id.
    pod = admin.json("get", "pod", "chatty", "-n", chatty)
    assert pod["status"]["containerStatuses"][0]["containerID"].endswith(working_set.labels["name"])
    assert any(s.name == "machine_memory_bytes" and s.value > 0 for s in samples)


def test_succeeded_pod_logs_remain_readable(chatty: str, admin: Kubectl, layout: Layout) -> None:
    admin.apply(pod_manifest("done", chatty, layout.node_name, [container("main", "echo finished")],
                             restartPolicy="Never"))
    wait_pod(admin, chatty, "done", phase("Succeeded"), what="Succeeded")
    assert wait_logs(admin, chatty, "done", expect="finished") == "finished\n"


def test_exec_over_websocket_straight_to_the_kubelet(chatty: str, layout: Layout) -> None:
    """The v4 channel protocol (what `kubectl exec` spoke before SPDY's translation in the apiserver)."""
    import asyncio

    import aiohttp

    async def run() -> dict[int, bytes]:
        ctx = ssl.create_default_context(cafile=str(layout.pki / "ca.crt"))
        ctx.check_hostname = False
        ctx.load_cert_chain(layout.pki / "admin.crt", layout.pki / "admin.key")
        url = (f"{KUBELET}/exec/{chatty}/chatty/main?command=sh&command=-c&command=echo+out%3B+echo+err+%3E%262"
               "&output=1&error=1")
        channels: dict[int, bytes] = {}
        async with aiohttp.ClientSession() as session, \
                session.ws_connect(url, protocols=["v4.channel.k8s.io"], ssl=ctx,
                                   timeout=aiohttp.ClientWSTimeout(ws_close=20)) as ws:
            assert ws.protocol == "v4.channel.k8s.io"
            async for msg in ws:
                if msg.type is aiohttp.WSMsgType.BINARY and msg.data:
                    channels[msg.data[0]] = channels.get(msg.data[0], b"") + msg.data[1:]
        return channels

    channels = asyncio.run(run())
    assert channels.get(1) == b"out\n" and channels.get(2) == b"err\n", channels
    assert json.loads(channels[3])["status"] == "Success", channels
