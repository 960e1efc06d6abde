"""System OOM reporting (upstream pkg/kubelet/oom): the kernel log's OOM kills, as Node events."""
