"""An image allowlist as an admission policy: a pod with an image not on the list is refused on this node before
anything of it is pulled or run, as upstream's admit handlers refuse a pod (phase Failed, reason ``ImageNotAllowed``,
message ``Pod was rejected: <why>``, a Warning event), and never retried.

    export KOPFLET_IMAGE_ALLOWLIST='registry.example.com/*,docker.io/library/busybox:*'
    kopflet --hooks examples.image_allowlist ...

Configuration, read when the agent loads the module (a policy that cannot be read stops the start):

- ``KOPFLET_IMAGE_ALLOWLIST``: comma-separated patterns, and/or ``KOPFLET_IMAGE_ALLOWLIST_FILE``: a file with one
  pattern a line (``#`` comments). A pattern is a shell glob (``*``, ``?``, ``[...]``) over the image's normalised
  reference, as the runtime is asked for it: ``busybox`` is ``docker.io/library/busybox:latest``, ``nginx:1.27``
  is ``docker.io/library/nginx:1.27``, a digest stays (``...@sha256:...``).
- ``KOPFLET_IMAGE_ALLOWLIST_EXEMPT_NAMESPACES``: comma-separated namespaces whose pods are not checked (none by
  default: the node's own DaemonSets and static pods are checked too).

The hook is registered with ``failure_policy="Fail"``: if it fails, the pod is rejected rather than let through.
Admission runs once per pod: an ephemeral container added later (``kubectl debug``) or an image changed in place is
not checked here (the apiserver's admission, e.g. a ValidatingAdmissionPolicy, is the place for those).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
from collections.abc import Mapping
from pathlib import Path

from kopflet import hooks
from kopflet.images import imageref

REASON = "ImageNotAllowed"
ALLOWLIST_ENV = "KOPFLET_IMAGE_ALLOWLIST"
ALLOWLIST_FILE_ENV = "KOPFLET_IMAGE_ALLOWLIST_FILE"
EXEMPT_ENV = "KOPFLET_IMAGE_ALLOWLIST_EXEMPT_NAMESPACES"


def normalise(image: str) -> str:
    """The reference the runtime is asked for: domain and ``library/`` filled in, ``:latest`` without a tag or
    digest. ValueError when it does not parse (the kubelet would refuse it too: InvalidImageName)."""
    ref = imageref.parse_normalized_named(image)
    tag = ref.tag or ("" if ref.digest else imageref.DEFAULT_TAG)
    return str(dataclasses.replace(ref, tag=tag))


@dataclasses.dataclass(frozen=True)
class Allowlist:
    patterns: tuple[str, ...]
    exempt_namespaces: frozenset[str] = frozenset()

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Allowlist:
        patterns = _csv(environ.get(ALLOWLIST_ENV, ""))
        path = environ.get(ALLOWLIST_FILE_ENV, "")
        if path:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
            patterns += [line.split("#", 1)[0].strip() for line in lines if line.split("#", 1)[0].strip()]
        if not patterns:
            raise ValueError(f"no image patterns: set {ALLOWLIST_ENV} (comma-separated) or {ALLOWLIST_FILE_ENV}")
        return cls(tuple(patterns), frozenset(_csv(environ.get(EXEMPT_ENV, ""))))

    def allows(self, image: str) -> bool:
        try:
            reference = normalise(image)
        except ValueError:
            return False
        return any(fnmatch.fnmatchcase(reference, pattern) for pattern in self.patterns)

    def admit(self, request: hooks.AdmitRequest) -> hooks.AdmitVerdict | None:
        """The admit hook: the first container whose image is not allowed refuses the pod."""
        if request.pod.namespace in self.exempt_namespaces:
            return None
        for name, image in request.images():
            if not self.allows(image):
                return hooks.reject(f'container {name}: image "{image}" is not allowed on node {request.node_name} '
                                    f"(not in its image allowlist)", reason=REASON)
        return None


def _csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def register(registry: hooks.Registry, allowlist: Allowlist) -> None:
    registry.admit(name="image-allowlist", failure_policy="Fail")(allowlist.admit)


ALLOWLIST = Allowlist.from_environ(os.environ)
register(hooks.registry, ALLOWLIST)
