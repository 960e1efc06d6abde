"""
An asynchronous client for the Kubernetes Container Runtime Interface (CRI v1), for containerd.

The only package of kopflet that imports grpc or the generated stubs (`cri_client.proto`). Callers use
`CriClient` (`cri_client.client`) with the plain dataclasses of `cri_client.types` and catch `CriError`
(`cri_client.errors`).

`types` and `errors` are pure and grpc-free, so the core may import them; this package's own import
stays light too: `CriClient` is loaded (with grpc) only when first used from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cri_client.errors import CriError

if TYPE_CHECKING:
    from cri_client.client import CriClient

__all__ = ["CriClient", "CriError"]


def __getattr__(name: str) -> Any:
    if name == "CriClient":
        from cri_client.client import CriClient

        return CriClient
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
