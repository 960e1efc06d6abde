"""The runtime's view of pods and containers, and their labels (upstream pkg/kubelet/container,
kuberuntime/labels.go)."""
