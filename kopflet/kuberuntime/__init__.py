"""The pod's actions against the CRI: computePodActions, sandbox and container configs, resize, GC (upstream
pkg/kubelet/kuberuntime)."""
