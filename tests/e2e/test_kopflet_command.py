"""The `kopflet` command with upstream kubelet flags and a KubeletConfiguration file, on the real stack."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from devstack.layout import Layout
from tests.conftest import REPO, Kubectl

KOPFLET = str(Path(sys.executable).with_name("kopflet"))


def test_kopflet_command_with_config_file_and_healthz(layout: Layout, admin: Kubectl, tmp_path: Path) -> None:
    config = tmp_path / "kubelet.yaml"
    config.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
                      "maxPods: 50\nclusterDomain: cluster.local\nhealthzPort: 10348\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KOPFLET_")}
    log = (tmp_path / "kopflet.log").open("wb")
    proc = subprocess.Popen([KOPFLET, f"--kubeconfig={layout.node_kubeconfig}", f"--config={config}",
                             f"--hostname-override={layout.node_name}",
                             f"--container-runtime-endpoint={layout.runtime_endpoint}"],
                            cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline, healthy = time.monotonic() + 60, False
        while time.monotonic() < deadline and not healthy:
            try:
                with urllib.request.urlopen("http://127.0.0.1:10348/healthz", timeout=2) as resp:
                    healthy = resp.status == 200
            except OSError:
                time.sleep(0.5)
        assert healthy, (tmp_path / "kopflet.log").read_text()[-3000:]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            node = json.loads(admin.run("get", "node", layout.node_name, "-o", "json").stdout)
            if node["status"]["capacity"]["pods"] == "50":
                break
            time.sleep(1)
        assert node["status"]["capacity"]["pods"] == "50"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        log.close()


def test_bad_config_file_names_the_field_and_starts_nothing(layout: Layout, tmp_path: Path) -> None:
    config = tmp_path / "kubelet.yaml"
    config.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPod: 50\n")
    proc = subprocess.run([KOPFLET, f"--kubeconfig={layout.node_kubeconfig}", f"--config={config}"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert 'unknown field "maxPod"' in proc.stderr and str(config) in proc.stderr
