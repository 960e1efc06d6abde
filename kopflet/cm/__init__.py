"""Pod and QoS cgroups (upstream pkg/kubelet/cm)."""
