"""Container environment variables and service links (upstream pkg/kubelet/envvars, makeEnvironmentVariables)."""
