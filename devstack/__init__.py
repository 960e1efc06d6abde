"""The local single-node Kubernetes stack kopflet is developed and tested against (not shipped)."""
