"""Helpers the kubelet keeps under pkg/kubelet/util: the watch-based object manager (`manager`)."""
