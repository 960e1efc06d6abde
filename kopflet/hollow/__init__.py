"""Hollow nodes (upstream kubemark's hollow kubelet): the whole agent over a simulated container runtime.

`kopflet.hollow.runtime` serves CRI v1 and containerd's event service from memory on a unix socket, so the agent's
reconciler, status, probes and API paths stay real and only the runtime's work is skipped.
"""
