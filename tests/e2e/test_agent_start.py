"""The agent starts as the node, checks the runtime, watches only its pods and writes nothing to them."""

from __future__ import annotations

import json
import re

from devstack.layout import Layout
from tests.conftest import Kubectl
from tests.e2e.conftest import Agent


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
