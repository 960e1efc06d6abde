"""Node registration, Lease and node status (upstream pkg/kubelet/nodestatus, nodelease,
kubelet_node_status.go)."""
