"""Upstream's node conformance specs run against kopflet and the upstream kubelet (`make conformance`)."""
