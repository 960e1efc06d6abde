"""Resource usage: /stats/summary and /metrics/resource (upstream pkg/kubelet/server/stats)."""
