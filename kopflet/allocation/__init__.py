"""In-place resize allocation: what each pod is allocated and what was actuated (upstream pkg/kubelet/allocation)."""
