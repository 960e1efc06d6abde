"""Upstream pkg/kubelet/apis: the kubelet's own local APIs (pod-resources), served on unix sockets."""
