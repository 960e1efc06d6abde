"""
Container image references parsed the way the upstream kubelet parses them, before it asks the runtime anything.

Why: upstream `EnsureImageExists` (pkg/kubelet/images/image_manager.go) first calls `applyDefaultImageTag`, which
parses the image with `parsers.ParseImageName` (pkg/util/parsers/parsers.go), i.e. `ParseNormalizedNamed` of
github.com/distribution/reference v0.6.0 with go-digest v1.0.0 for the digest. A reference that does not parse
never reaches the runtime: the container waits with ``InvalidImageName`` (images.ErrInvalidImageName) and the
message of `InvalidImageNameError`, and a Warning ``InspectFailed`` event carries the same message.

The grammar is upstream's regexp.go, translated to Python's `re` with Go's meaning kept: `fullmatch` for Go's
``^...$`` (Python's ``$`` would also match before a trailing newline), explicit ASCII classes for Go's ``\\w`` and
``[[:xdigit:]]``. The kubelet links sha256 and sha512 in, so sha256, sha384 and sha512 digests are "available".

Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import re

from kopflet import gotext

DEFAULT_DOMAIN = "docker.io"
LEGACY_DEFAULT_DOMAIN = "index.docker.io"
OFFICIAL_REPO_PREFIX = "library/"
LOCALHOST = "localhost"
DEFAULT_TAG = "latest"
REPOSITORY_NAME_TOTAL_LENGTH_MAX = 255
"""reference.RepositoryNameTotalLengthMax: counted on the path only (without the domain), as v0.6.0 does."""

# reference.go's errors, word for word.
ERR_REFERENCE_INVALID_FORMAT = "invalid reference format"
ERR_NAME_CONTAINS_UPPERCASE = "repository name must be lowercase"
ERR_NAME_EMPTY = "repository name must have at least one component"
ERR_NAME_TOO_LONG = f"repository name must not be more than {REPOSITORY_NAME_TOTAL_LENGTH_MAX} characters"
# go-digest's errors (digest.go).
ERR_DIGEST_INVALID_FORMAT = "invalid checksum digest format"
ERR_DIGEST_INVALID_LENGTH = "invalid checksum digest length"
ERR_DIGEST_UNSUPPORTED = "unsupported digest algorithm"

# regexp.go (distribution/reference v0.6.0).
_ALPHANUMERIC = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|[-]+)"
_DOMAIN_NAME_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_OPTIONAL_PORT = r"(?::[0-9]+)?"
_TAG = r"[0-9A-Za-z_][0-9A-Za-z_.-]{0,127}"  # Go's \w is ASCII only
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*[:][0-9A-Fa-f]{32,}"
_IDENTIFIER = r"[a-f0-9]{64}"
_IPV6_ADDRESS = r"\[(?:[a-fA-F0-9:]+)\]"
_DOMAIN_NAME = _DOMAIN_NAME_COMPONENT + r"(?:\." + _DOMAIN_NAME_COMPONENT + r")*"
_HOST = f"(?:{_DOMAIN_NAME}|{_IPV6_ADDRESS})"
_DOMAIN_AND_PORT = _HOST + _OPTIONAL_PORT
_PATH_COMPONENT = _ALPHANUMERIC + f"(?:{_SEPARATOR}{_ALPHANUMERIC})*"
_REMOTE_NAME = _PATH_COMPONENT + f"(?:/{_PATH_COMPONENT})*"
_NAME = f"(?:{_DOMAIN_AND_PORT}/)?{_REMOTE_NAME}"

_REFERENCE = re.compile(f"({_NAME})(?::({_TAG}))?(?:@({_DIGEST}))?")
_ANCHORED_NAME = re.compile(f"(?:({_DOMAIN_AND_PORT})/)?({_REMOTE_NAME})")
_ANCHORED_IDENTIFIER = re.compile(_IDENTIFIER)

# go-digest v1.0.0: DigestRegexpAnchored and the hex lengths of the algorithms the kubelet links in.
_GO_DIGEST = re.compile(r"[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[a-zA-Z0-9=_-]+")
_DIGEST_HEX_LENGTH = {"sha256": 64, "sha384": 96, "sha512": 128}


class InvalidReferenceError(ValueError):
    """`ParseNormalizedNamed` failed; the text is upstream's error (``invalid reference format`` ...)."""


class InvalidImageNameError(ValueError):
    """`applyDefaultImageTag` failed: `message` is upstream's whole text, for the waiting message and the event."""

    def __init__(self, image: str, cause: str) -> None:
        self.image, self.cause = image, cause
        # ParseImageName wraps the parse error, EnsureImageExists wraps that.
        self.message = (f"Failed to apply default image tag {gotext.go_quote(image)}: "
                        f"couldn't parse image name {gotext.go_quote(image)}: {cause}")
        super().__init__(self.message)


@dataclasses.dataclass(frozen=True)
class Reference:
    """A parsed, normalised reference (upstream `reference`): `tag` and `digest` may be empty."""

    domain: str
    path: str
    tag: str = ""
    digest: str = ""

    @property
    def name(self) -> str:
        """upstream `repository.Name()`: ``domain/path`` (``docker.io/library/busybox``)."""
        return f"{self.domain}/{self.path}" if self.domain else self.path

    def __str__(self) -> str:
        """upstream `reference.String()`: the name, then ``:tag``, then ``@digest``."""
        return self.name + (f":{self.tag}" if self.tag else "") + (f"@{self.digest}" if self.digest else "")


def apply_default_tag(image: str) -> str:
    """`image` with ``:latest`` appended when it has neither tag nor digest (upstream `applyDefaultImageTag`).

    The name is not qualified (``busybox`` -> ``busybox:latest``, not ``docker.io/library/busybox:latest``), so
    the runtime still sees the name the pod gave. Raises `InvalidImageNameError` when the reference does not parse.
    """
    try:
        ref = parse_normalized_named(image)
    except InvalidReferenceError as exc:
        raise InvalidImageNameError(image, str(exc)) from None
    # parsers.ParseImageName: no tag and no digest means the default tag.
    tag = ref.tag or ("" if ref.digest else DEFAULT_TAG)
    if not ref.digest and tag and not image.endswith(f":{tag}"):
        return f"{image}:{tag}"
    return image


def parse_normalized_named(text: str) -> Reference:
    """Upstream `ParseNormalizedNamed`: Docker Hub short names completed, uppercase and 64-hex names refused."""
    if _ANCHORED_IDENTIFIER.fullmatch(text):
        raise InvalidReferenceError(
            f"invalid repository name ({text}), cannot specify 64-byte hexadecimal strings")
    domain, remainder = split_docker_domain(text)
    remote = remainder.partition(":")[0]
    if remote.lower() != remote:
        raise InvalidReferenceError(
            f"{ERR_REFERENCE_INVALID_FORMAT}: repository name ({remote}) must be lowercase")
    # Parse of "domain/remainder" always has a name, so upstream's "reference %s has no name" cannot happen here.
    return parse(f"{domain}/{remainder}")


def split_docker_domain(name: str) -> tuple[str, str]:
    """Upstream `splitDockerDomain`: the first component is a domain only if it looks like one."""
    maybe_domain, slash, maybe_remote = name.partition("/")
    if not slash:
        return DEFAULT_DOMAIN, OFFICIAL_REPO_PREFIX + name
    if maybe_domain == LOCALHOST:
        domain, remote = maybe_domain, maybe_remote
    elif maybe_domain == LEGACY_DEFAULT_DOMAIN:  # before the dot test, as upstream's switch has it
        domain, remote = DEFAULT_DOMAIN, maybe_remote
    elif "." in maybe_domain or ":" in maybe_domain or maybe_domain.lower() != maybe_domain:
        domain, remote = maybe_domain, maybe_remote
    else:
        domain, remote = DEFAULT_DOMAIN, name
    if domain == DEFAULT_DOMAIN and "/" not in remote:
        remote = OFFICIAL_REPO_PREFIX + remote
    return domain, remote


def parse(text: str) -> Reference:
    """Upstream `reference.Parse`: the grammar, the path length, then the digest (go-digest `Parse`)."""
    match = _REFERENCE.fullmatch(text)
    if match is None:
        if not text:
            raise InvalidReferenceError(ERR_NAME_EMPTY)
        if _REFERENCE.fullmatch(text.lower()):
            raise InvalidReferenceError(ERR_NAME_CONTAINS_UPPERCASE)
        raise InvalidReferenceError(ERR_REFERENCE_INVALID_FORMAT)
    name, tag, digest = match.group(1), match.group(2) or "", match.group(3) or ""
    name_match = _ANCHORED_NAME.fullmatch(name)  # the same language as the name group: it always matches
    domain, path = (name_match.group(1) or "", name_match.group(2)) if name_match else ("", name)
    if len(path) > REPOSITORY_NAME_TOTAL_LENGTH_MAX:
        raise InvalidReferenceError(ERR_NAME_TOO_LONG)
    if digest:
        error = validate_digest(digest)
        if error:
            raise InvalidReferenceError(error)
    return Reference(domain=domain, path=path, tag=tag, digest=digest)


def validate_digest(digest: str) -> str | None:
    """go-digest `Digest.Validate`: None when valid, else its error text."""
    colon = digest.find(":")
    if colon <= 0 or colon + 1 == len(digest):
        return ERR_DIGEST_INVALID_FORMAT
    algorithm, encoded = digest[:colon], digest[colon + 1:]
    length = _DIGEST_HEX_LENGTH.get(algorithm)
    if length is None:
        return ERR_DIGEST_INVALID_FORMAT if not _GO_DIGEST.fullmatch(digest) else ERR_DIGEST_UNSUPPORTED
    if len(encoded) != length:
        return ERR_DIGEST_INVALID_LENGTH
    if not re.fullmatch(r"[a-f0-9]+", encoded):  # upper-case hex is refused
        return ERR_DIGEST_INVALID_FORMAT
    return None
