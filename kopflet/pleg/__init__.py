"""The pod lifecycle event generator: relisting the runtime (upstream pkg/kubelet/pleg)."""
