"""Benchmarks (`make bench`): kopflet beside the upstream kubelet and the runtime floor, on the real stack."""
