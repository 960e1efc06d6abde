"""Per-pod workers and housekeeping (upstream pod_workers.go, HandlePodCleanups)."""
