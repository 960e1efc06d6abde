"""Liveness, readiness and startup probes (upstream pkg/kubelet/prober, pkg/probe)."""
