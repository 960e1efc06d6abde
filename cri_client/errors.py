"""
The one exception of the CRI client.

Every failed RPC becomes a `CriError` carrying the gRPC status code, the runtime's own message and the
method, so callers branch on `.not_found` / `.unavailable` instead of importing grpc, and logs show what
the runtime actually said (containerd puts the useful part, e.g. the image name, in the details).

Pure, and free of grpc: the code is kept as the status code's name ("NOT_FOUND", the name of
`grpc.StatusCode.NOT_FOUND`), so the pure core can import and inspect this error without pulling in gRPC.
"""

from __future__ import annotations

import enum


class CriError(Exception):
    """A CRI call failed: the runtime answered with a non-OK status, or could not be reached."""

    code: str
    details: str
    method: str
    endpoint: str

    def __init__(self, code: str | enum.Enum, details: str = "", method: str = "", endpoint: str = "") -> None:
        # Accept a grpc.StatusCode too, but keep only its name: comparable, printable, picklable.
        code = code.name if isinstance(code, enum.Enum) else str(code)
        # Positional args only, all passed to Exception: keeps the error picklable and copyable.
        super().__init__(code, details, method, endpoint)
        self.code = code
        self.details = details
        self.method = method
        self.endpoint = endpoint

    def __str__(self) -> str:
        # "RuntimeService/Version at unix:///run/...sock: UNAVAILABLE: <runtime's message>"
        endpoint = self.endpoint if self.endpoint and self.endpoint not in self.details else ""
        where = " at ".join(part for part in (self.method, endpoint) if part)
        prefix = f"{where}: " if where else ""
        return f"{prefix}{self.code}: {self.details or '(no details)'}"

    @property
    def go_text(self) -> str:
        """The error as the upstream kubelet prints a gRPC status in events: "rpc error: code = NotFound desc = ..."
        (grpc-go's status error, with its CamelCase code names)."""
        name = "Canceled" if self.code == "CANCELLED" else "".join(p.capitalize() for p in self.code.split("_"))
        return f"rpc error: code = {name} desc = {self.details}"

    @property
    def not_found(self) -> bool:
        """The object (sandbox, container, image) does not exist: usually already removed."""
        return self.code == "NOT_FOUND"

    @property
    def unavailable(self) -> bool:
        """The runtime is down or restarting: retry later, do not treat as a pod failure."""
        return self.code == "UNAVAILABLE"

    @property
    def deadline_exceeded(self) -> bool:
        """The call (or, for ExecSync, the command) outlived its deadline; the runtime may still finish it."""
        return self.code == "DEADLINE_EXCEEDED"

    @property
    def already_exists(self) -> bool:
        """A name is taken (e.g. a sandbox or container name reserved by an earlier attempt)."""
        return self.code == "ALREADY_EXISTS"

    @property
    def unimplemented(self) -> bool:
        """The runtime does not implement this call (an older CRI or an optional RPC)."""
        return self.code == "UNIMPLEMENTED"
