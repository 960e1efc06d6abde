"""Image references, pull credentials and pulls (upstream pkg/kubelet/images, pkg/credentialprovider)."""
