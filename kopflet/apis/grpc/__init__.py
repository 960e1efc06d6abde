"""Upstream pkg/kubelet/apis/grpc: what the kubelet's local gRPC servers share (the rate limit)."""
