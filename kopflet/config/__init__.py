"""The kubelet's flags and KubeletConfiguration, and the static-pod file source (upstream pkg/kubelet/config,
pkg/kubelet/apis/config, cmd/kubelet/app/options)."""
