"""The kubelet's HTTPS API: logs, exec, attach, port-forward, stats, metrics (upstream pkg/kubelet/server)."""
