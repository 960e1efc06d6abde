"""The pods every agent is measured with: the same manifests for kopflet and the upstream kubelet.

Bound to the node directly (spec.nodeName: no scheduler in the measured path), with the busybox image
already pulled, a default ServiceAccount token volume as any ordinary pod has, and BestEffort resources.
"""

from __future__ import annotations

IMAGE = "docker.io/library/busybox:1.36"

# Exits at once on SIGTERM: PID 1 in a container ignores signals it has no handler for, so a bare
# `sleep` would make every delete wait out the grace period.
SLEEP_UNTIL_TERM = "trap 'exit 0' TERM; sleep 3600 & wait"


def pod(name: str, node: str, command: str = SLEEP_UNTIL_TERM, restart_policy: str = "Always",
        labels: dict[str, str] | None = None) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "kopflet-bench", **(labels or {})}},
        "spec": {
            "nodeName": node,
            "restartPolicy": restart_policy,
            "terminationGracePeriodSeconds": 30,
            "containers": [{"name": "main", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                            "command": ["sh", "-c", command]}],
        },
    }


def exiting_pod(name: str, node: str, after_seconds: float = 2) -> dict:
    """A pod whose only container exits 0 after a moment: measures exit to status."""
    return pod(name, node, command=f"sleep {after_seconds}", restart_policy="Never")


def churn_pod(name: str, node: str, index: int) -> dict:
    """A mix of specs for the churn: plain, with a configMap-free emptyDir, and with an init container."""
    manifest = pod(name, node)
    spec = manifest["spec"]
    if index % 3 == 1:
        spec["volumes"] = [{"name": "scratch", "emptyDir": {}}]
        spec["containers"][0]["volumeMounts"] = [{"name": "scratch", "mountPath": "/scratch"}]
    elif index % 3 == 2:
        spec["initContainers"] = [{"name": "init", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                                   "command": ["true"]}]
    return manifest
