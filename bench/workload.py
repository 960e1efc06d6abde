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


# The soak pulls these round-robin (imagePullPolicy Always: every pod goes through the agent's pull path).
# All are images the dev stack pushes to its local registry (images/build.py's IMAGES, and agnhost's
# AgnhostPrev tag, whose version does not depend on the build), and all have busybox's sh.
SOAK_IMAGES: tuple[str, ...] = (
    IMAGE,
    "registry.k8s.io/e2e-test-images/busybox:1.37.0-2",
    "registry.k8s.io/e2e-test-images/nginx:1.27.0-2",
    "registry.k8s.io/e2e-test-images/agnhost:2.55",
)
SOAK_INIT_KIB = 32


def write_log(kib: int, stream: str = "stdout") -> str:
    """Shell that writes about `kib` KiB in lines of 1 KiB to stdout or stderr (busybox sh builtins only)."""
    redirect = " >&2" if stream == "stderr" else ""
    return ('l=0123456789abcdef; for _ in 1 2 3 4 5 6; do l="$l$l"; done; '
            f'i=0; while [ "$i" -lt {kib} ]; do echo "$i $l"{redirect}; i=$((i+1)); done')


def soak_pod(name: str, node: str, index: int, log_kib: int, restart_every: int, restarts: int = 1) -> dict:
    """One soak cycle's pod: an init container and a main container that write logs and exit, from the
    `index`-th image round-robin. Every `restart_every`-th pod is restartPolicy OnFailure and its main
    container fails its first `restarts` runs (a counter in an emptyDir), so dead containers of a live pod
    exist too; the others are restartPolicy Never. The pod ends Succeeded."""
    image = SOAK_IMAGES[index % len(SOAK_IMAGES)]
    restarting = restart_every > 0 and index % restart_every == 0
    main = write_log(log_kib)
    if restarting:
        main = (f'n=$(cat /state/runs 2>/dev/null || echo 0); echo $((n+1)) > /state/runs; {main}; '
                f'[ "$n" -ge {restarts} ]')
    manifest = pod(name, node, command=main, restart_policy="OnFailure" if restarting else "Never",
                   labels={"kopflet.dev/bench": "soak"})
    spec = manifest["spec"]
    container = spec["containers"][0]
    container["image"] = image
    container["imagePullPolicy"] = "Always"
    spec["initContainers"] = [{"name": "init", "image": image, "imagePullPolicy": "Always",
                               "command": ["sh", "-c", write_log(SOAK_INIT_KIB, "stderr")]}]
    if restarting:
        spec["volumes"] = [{"name": "state", "emptyDir": {}}]
        container["volumeMounts"] = [{"name": "state", "mountPath": "/state"}]
    return manifest


def soak_pod_log_bytes(log_kib: int, restarts: int = 1) -> int:
    """The most log bytes one soak pod leaves: the init's and every run of the main container, with the CRI
    log format's per-line prefix (timestamp, stream, tag: under 48 bytes)."""
    lines = SOAK_INIT_KIB + log_kib * (1 + restarts)
    return lines * (1024 + 8 + 48)

