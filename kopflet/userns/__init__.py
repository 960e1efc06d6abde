"""User namespaces for ``hostUsers: false`` pods: their ID ranges, allocated, persisted and freed (upstream
pkg/kubelet/userns)."""
