"""Pod volumes: plans, payloads and mounts (upstream pkg/kubelet/volumemanager, pkg/volume)."""
