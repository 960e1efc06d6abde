"""The agent starts as the node, checks the runtime, watches only its pods and writes nothing to them."""

from __future__ import annotations

import json
import re
import ssl
import time
from pathlib import Path

from devstack.layout import Layout
from tests.conftest import Kubectl
from tests.e2e.conftest import Agent
from tests.e2e.test_kubelet_api import handshake


def test_agent_runs_as_the_node_and_sees_its_pods(agent: Agent, admin: Kubectl, layout: Layout,
                                                  namespace: str) -> None:
    agent.wait_for(r"container runtime containerd \S+ \(CRI v1\)")
    agent.wait_for(r"watching pods with 'spec\.nodeName=" + layout.node_name)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "seen", "namespace": namespace},
           "spec": {"nodeName": layout.node_name, "automountServiceAccountToken": False,
                    "containers": [{"name": "c", "image": "docker.io/library/busybox:1.36"}]}}
    other = {**pod, "metadata": {"name": "not-ours", "namespace": namespace},
             "spec": {**pod["spec"], "nodeName": "some-other-node"}}
    admin.apply(json.dumps(other))
    admin.apply(json.dumps(pod))
    agent.wait_for(rf"pod {namespace}/seen: ")
    assert f"{namespace}/not-ours" not in agent.output()

    meta = admin.json("get", "pod", "seen", "-n", namespace)["metadata"]
    assert not meta.get("finalizers")
    assert not [a for a in meta.get("annotations", {}) if "kopf" in a]

    assert agent.stop() == 0
    refused = re.findall(r".*(?:Forbidden|status=403|code.: 403).*", agent.output())
    assert not refused, "\n".join(refused)


def test_a_new_boot_id_is_a_rebooted_event(admin: Kubectl, layout: Layout, tmp_path: Path) -> None:
    """The Node last reported another boot id (upstream MachineInfo setter): one Warning Rebooted event, then
    the Node carries this boot's id."""
    boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    stale = "00000000-0000-4000-8000-000000000000"
    admin.run("patch", "node", layout.node_name, "--subresource=status", "--type=merge",
              "-p", json.dumps({"status": {"nodeInfo": {"bootID": stale}}}))
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 1))
    agent = Agent(layout, tmp_path / "agent.log")
    agent.start()
    try:
        agent.wait_for(r"Activity 'start_agent' succeeded")
        selector = f"involvedObject.kind=Node,involvedObject.name={layout.node_name},reason=Rebooted"
        deadline = time.monotonic() + 30
        mine: list[dict] = []
        while not mine:
            assert time.monotonic() < deadline, "no Rebooted event on the node"
            time.sleep(1)
            items = admin.json("get", "events", "-n", "default", "--field-selector", selector)["items"]
            mine = [e for e in items if (e.get("lastTimestamp") or "") >= since]
        assert len(mine) == 1 and mine[0]["count"] == 1, mine
        assert (mine[0]["type"], mine[0]["message"]) == (
            "Warning", f"Node {layout.node_name} has been rebooted, boot id: {boot_id}")
        assert admin.json("get", "node", layout.node_name)["status"]["nodeInfo"]["bootID"] == boot_id
    finally:
        agent.stop()


def test_tls_min_version_is_honoured(admin: Kubectl, layout: Layout, tmp_path: Path) -> None:
    agent = Agent(layout, tmp_path / "agent.log", env={"KOPFLET_ARGS": "--tls-min-version=VersionTLS13"})
    agent.start()
    try:
        agent.wait_for(r"Activity 'start_agent' succeeded")
        assert not handshake(ssl.TLSVersion.TLSv1_2) and handshake(ssl.TLSVersion.TLSv1_3)
        config = json.loads(admin.raw(f"/api/v1/nodes/{layout.node_name}/proxy/configz").stdout)["kubeletconfig"]
        assert config["tlsMinVersion"] == "VersionTLS13"
    finally:
        agent.stop()
