"""The agent with only the manifests' ClusterRole (as the DaemonSet's ServiceAccount, not a node identity):
a pod with the things its rules exist for (volumes from a ConfigMap, Secret and a projected token, env,
events, status, deletion) runs and goes away, and nothing the agent asks is refused."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest

from devstack.layout import Layout
from tests.conftest import Kubectl
from tests.e2e.conftest import Agent
from tests.e2e.test_pod_lifecycle import container, events, is_ready, pod_manifest, wait_gone, wait_pod
from tests.stack.test_manifests import remove_service_account, service_account_kubeconfig


@pytest.fixture(scope="module")
def role_agent(layout: Layout, admin: Kubectl, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agent]:
    folder = tmp_path_factory.mktemp("role-agent")
    kubeconfig = service_account_kubeconfig(admin, folder / "sa.kubeconfig")
    # As the DaemonSet's config: a GET for each ConfigMap and Secret (the role grants no list or watch of them).
    dropins = folder / "kubelet.conf.d"
    dropins.mkdir()
    (dropins / "10-objects.conf").write_text(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
        "configMapAndSecretChangeDetectionStrategy: Get\n")
    agent = Agent(layout, folder / "agent.log", env={"KUBECONFIG": str(kubeconfig),
                                                     "KOPFLET_ARGS": f"--config-dir={dropins}"})
    agent.start()
    try:
        agent.wait_for(r"Activity 'start_agent' succeeded")
        yield agent
    finally:
        if agent.proc is not None and agent.proc.poll() is None:
            agent.stop()
        remove_service_account(admin)


def test_a_full_pod_lifecycle_needs_nothing_beyond_the_role(role_agent: Agent, admin: Kubectl, layout: Layout,
                                                            namespace: str) -> None:
    admin.run("create", "configmap", "conf", "-n", namespace, "--from-literal=k=v")
    admin.run("create", "secret", "generic", "creds", "-n", namespace, "--from-literal=p=s")
    body = json.loads(pod_manifest("roled", namespace, layout.node_name, [container(
        "main", "cat /conf/k /creds/p && sleep 3600", env=[{"name": "P", "valueFrom": {
            "secretKeyRef": {"name": "creds", "key": "p"}}}],
        volumeMounts=[{"name": "conf", "mountPath": "/conf"}, {"name": "creds", "mountPath": "/creds"}])],
        volumes=[{"name": "conf", "configMap": {"name": "conf"}},
                 {"name": "creds", "secret": {"secretName": "creds"}}]))
    del body["spec"]["automountServiceAccountToken"]  # the projected token volume: serviceaccounts/token
    admin.apply(json.dumps(body))
    wait_pod(admin, namespace, "roled", is_ready, what="Ready")
    assert {"Pulled", "Created", "Started"} <= {e["reason"] for e in events(admin, namespace, "roled")}
    admin.run("delete", "pod", "roled", "-n", namespace, "--wait=false")
    wait_gone(admin, namespace, "roled", timeout=60)
    refused = re.findall(r".*(?:Forbidden|status=403|code.: 403| 403 ).*", role_agent.output())
    assert not refused, "\n".join(refused[:10])
