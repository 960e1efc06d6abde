"""
The one exception of the CSI client, and upstream's rule for which gRPC errors end an operation.

Every failed call to a CSI driver becomes a `CSIError` carrying the gRPC status code's name, the driver's own
message, the method and the endpoint (as `cri_client.errors.CriError` does for the runtime), so callers branch on
`.final` / `.uncertain` instead of importing grpc. Errors found before any call (``missing volume id``) have no
code.

`is_final_error` is upstream csi_client.go ``isFinalError``: a gRPC code that means the driver may still be working
on the request (cancelled, timed out, unavailable, out of resources, aborted) is not final, so the volume operation
is uncertain and must be retried or cleaned up as if it might have happened. Upstream wraps exactly those errors of
NodeStageVolume, NodePublishVolume, NodeExpandVolume and NodeGetCapabilities in an ``UncertainProgressError``
(`uncertain` here).

Pure, and free of grpc: the code is the name of the `grpc.StatusCode` member ("UNAVAILABLE").
"""

from __future__ import annotations

import enum

# csi_client.go isFinalError: the codes after which "previous volume operation may be still in progress".
TRANSIENT_CODES = frozenset({
    "CANCELLED",  # gRPC: client application cancelled the request
    "DEADLINE_EXCEEDED",  # gRPC: timeout
    "UNAVAILABLE",  # gRPC: server shutting down, TCP connection broken
    "RESOURCE_EXHAUSTED",  # gRPC: server temporarily out of resources
    "ABORTED",  # CSI: operation pending for volume
})


def is_final_error(code: str | enum.Enum | None) -> bool:
    """Upstream isFinalError: False for a transient gRPC code, and for an error that is no gRPC status at all
    (`code` None or empty: the call failed before it reached the driver, which may still be busy with an earlier
    one: "be on the safe side"); True for every other code (the operation did not start or failed for sure)."""
    if code is None:
        return False
    name = code.name if isinstance(code, enum.Enum) else str(code)
    return bool(name) and name not in TRANSIENT_CODES


class CSIError(Exception):
    """A CSI call failed: the driver answered with a non-OK status, could not be reached, or the request was refused
    before it was sent (no `code`). `uncertain` is upstream's UncertainProgressError: the operation may still be in
    progress on the driver."""

    code: str
    details: str
    method: str
    endpoint: str
    uncertain: bool

    def __init__(self, code: str | enum.Enum, details: str = "", method: str = "", endpoint: str = "",
                 uncertain: bool = False) -> None:
        code = code.name if isinstance(code, enum.Enum) else str(code)
        super().__init__(code, details, method, endpoint, uncertain)  # picklable and copyable
        self.code, self.details, self.method, self.endpoint, self.uncertain = code, details, method, endpoint, uncertain

    def __str__(self) -> str:
        if not self.code:
            return self.details
        where = " at ".join(part for part in (self.method, self.endpoint) if part)
        return f"{where + ': ' if where else ''}{self.code}: {self.details or '(no details)'}"

    @property
    def go_text(self) -> str:
        """The error as upstream's messages print it: grpc-go's ``rpc error: code = NotFound desc = ...`` for a
        status, the plain text otherwise."""
        if not self.code:
            return self.details
        name = "Canceled" if self.code == "CANCELLED" else "".join(p.capitalize() for p in self.code.split("_"))
        return f"rpc error: code = {name} desc = {self.details}"

    @property
    def final(self) -> bool:
        """Upstream isFinalError of this error."""
        return is_final_error(self.code or None)

    @property
    def not_found(self) -> bool:
        return self.code == "NOT_FOUND"

    @property
    def unimplemented(self) -> bool:
        return self.code == "UNIMPLEMENTED"

    @property
    def unavailable(self) -> bool:
        return self.code == "UNAVAILABLE"


__all__ = ["TRANSIENT_CODES", "CSIError", "is_final_error"]
