"""The `kopflet` command with upstream kubelet flags and a KubeletConfiguration file, on the real stack."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from devstack.layout import Layout
from tests.conftest import REPO, Kubectl

KOPFLET = str(Path(sys.executable).with_name("kopflet"))


@contextlib.contextmanager
def kopflet(layout: Layout, tmp_path: Path, *args: str, healthz_port: int) -> Iterator[Path]:
    """The `kopflet` command on the stack's node, until it serves /healthz on `healthz_port`; its stdout and stderr
    go to files of their own (the paths yielded: stderr's; stdout's beside it), and it must stop cleanly."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KOPFLET_")}
    out_path, err_path = tmp_path / "kopflet.stdout", tmp_path / "kopflet.log"
    with out_path.open("wb") as out, err_path.open("wb") as err:
        proc = subprocess.Popen([KOPFLET, f"--kubeconfig={layout.node_kubeconfig}", *args,
                                 f"--hostname-override={layout.node_name}",
                                 f"--container-runtime-endpoint={layout.runtime_endpoint}"],
                                cwd=REPO, env=env, stdout=out, stderr=err)
        try:
            deadline, healthy = time.monotonic() + 60, False
            while time.monotonic() < deadline and not healthy:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{healthz_port}/healthz", timeout=2) as resp:
                        healthy = resp.status == 200
                except OSError:
                    time.sleep(0.5)
            assert healthy, err_path.read_text()[-3000:]
            yield err_path
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0


def wait_capacity_pods(admin: Kubectl, layout: Layout, pods: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        node = json.loads(admin.run("get", "node", layout.node_name, "-o", "json").stdout)
        if node["status"]["capacity"]["pods"] == pods:
            break
        time.sleep(1)
    assert node["status"]["capacity"]["pods"] == pods


def test_kopflet_command_with_config_file_and_healthz(layout: Layout, admin: Kubectl, tmp_path: Path) -> None:
    config = tmp_path / "kubelet.yaml"
    config.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
                      "maxPods: 50\nclusterDomain: cluster.local\nhealthzPort: 10348\n")
    with kopflet(layout, tmp_path, f"--config={config}", healthz_port=10348):
        wait_capacity_pods(admin, layout, "50")


def test_drop_ins_node_log_query_and_split_logs(layout: Layout, admin: Kubectl, tmp_path: Path) -> None:
    """--config-dir drop-ins merged onto --config (flags win; /configz shows the result), the node log query on
    /logs/ that a drop-in turns on, and the json log split: info on stdout, errors on stderr."""
    # the stack's own KubeletConfiguration (serving certificate, client CA, webhook authn/z) as --config, so the
    # apiserver reaches /configz and /logs/ as it reaches the stack's agent; the test's settings in the drop-ins
    drop_ins = tmp_path / "config.d"
    (drop_ins / "sub").mkdir(parents=True)
    header = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
    (drop_ins / "10-a.conf").write_text(header + "maxPods: 60\nsystemReserved: {memory: 100Mi}\n"
                                        "enableSystemLogQuery: true\nhealthzPort: 10348\n")
    (drop_ins / "sub" / "20-b.conf").write_text(header + "maxPods: 65\nsystemReserved: {cpu: 100m}\n")
    (drop_ins / "README.txt").write_text("not a drop-in: skipped\n")
    log_name = f"kopflet-e2e-{os.getpid()}.log"
    var_log = Path("/var/log") / log_name
    var_log.write_text("hello from the node's log\n")
    try:
        with kopflet(layout, tmp_path, f"--config={layout.kubelet_config}", f"--config-dir={drop_ins}", "--max-pods=70",
                     "--logging-format=json", "--feature-gates=LoggingAlphaOptions=true",
                     "--log-json-split-stream", healthz_port=10348) as stderr_path:
            wait_capacity_pods(admin, layout, "70")  # the flag wins over both files
            proxy = f"/api/v1/nodes/{layout.node_name}/proxy"
            configz = json.loads(admin.raw(f"{proxy}/configz").stdout)["kubeletconfig"]
            assert configz["maxPods"] == 70
            assert configz["systemReserved"] == {"cpu": "100m", "memory": "100Mi"}
            assert configz["enableSystemLogQuery"] is True
            # the node log query: a file under /var/log by name, and upstream's refusals
            assert admin.raw(f"{proxy}/logs/?query={log_name}").stdout == "hello from the node's log\n"
            assert admin.raw(f"{proxy}/logs/{log_name}").stdout == "hello from the node's log\n"
            refused = admin.raw(f"{proxy}/logs/?query=a%3Bb", check=False)
            assert refused.returncode != 0 and "unsupported characters" in refused.stderr + refused.stdout
            # json split: the info lines on stdout, none of them on stderr
            stdout = (tmp_path / "kopflet.stdout").read_text().splitlines()
            assert stdout and all('"v":' in line for line in stdout), stdout[:3]
            assert all('"v":' not in line for line in stderr_path.read_text().splitlines())
    finally:
        var_log.unlink()


def test_bad_config_file_names_the_field_and_starts_nothing(layout: Layout, tmp_path: Path) -> None:
    config = tmp_path / "kubelet.yaml"
    config.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPod: 50\n")
    proc = subprocess.run([KOPFLET, f"--kubeconfig={layout.node_kubeconfig}", f"--config={config}"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert 'unknown field "maxPod"' in proc.stderr and str(config) in proc.stderr
