"""Pod admission, active deadlines and lifecycle hooks (upstream pkg/kubelet/lifecycle, active_deadline.go)."""
