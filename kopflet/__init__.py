"""kopflet, the node agent: one package per upstream kubelet subsystem (docs/architecture.md has the map).

Pure modules (`.importlinter`'s `pure` contract) do no I/O; the others each name the upstream part they mirror.
"""

__version__ = "0.1.0"
