"""
The image pull credential keyring built from a pod's imagePullSecrets.

Mirrors upstream `credentialprovider` (pkg/credentialprovider): `secrets.MakeDockerKeyring` reads Secrets of type
``kubernetes.io/dockerconfigjson`` (``.dockerconfigjson``: ``{"auths": {registry: entry}}``) and
``kubernetes.io/dockercfg`` (``.dockercfg``: the bare ``{registry: entry}`` map); `DockerConfigEntry.UnmarshalJSON`
(config.go) takes username and password, or decodes them from ``auth`` (base64 ``user:pass``);
`BasicDockerKeyring.Add` / `Lookup` (keyring.go) index the entries by ``host[/path]`` and return every credential
whose key matches the image, most specific key first, so the caller tries them in order until a pull succeeds
(upstream `PullImage`), and pulls anonymously when there are none.

Matching (`URLsMatch`): the image is normalised first (``busybox`` is ``docker.io/library/busybox``, tag and digest
dropped, as `parsers.ParseImageName`); a key's scheme and a leading ``/v1/`` or ``/v2/`` are dropped; the ports
must be equal; the hosts must have as many dot-separated labels and each label must match as a Go
`filepath.Match` glob (``*.example.com``); the key's path must be a string prefix of the image's path. Keys go
through Go 1.26's url.Parse (the kubelet's toolchain), which allows ``[`` only to open an IPv6 literal and reads
``?`` as the query, so ``*`` is in practice the only wildcard. Docker Hub:
a ``docker.io`` key matches Docker Hub images directly; ``index.docker.io`` (also as ``https://index.docker.io/v1/``)
is used for them only when no key matched at all (`isDefaultRegistryMatch`). ``registry-1.docker.io`` is not an
alias upstream: it matches only images that name that host.

As upstream, only username and password are taken from an entry: ``email``, ``identitytoken`` and
``registrytoken`` are ignored, and ``server_address`` stays empty.

Deliberate differences, because a pull should not be blocked by one bad secret:
- a secret whose JSON or ``auth`` field is malformed is skipped with a warning; upstream fails the whole
  credential lookup, and with it the image pull, with the JSON error;
- secrets of another type, or without their data key, are skipped with a warning; upstream skips them silently.
An entry whose registry is not a valid URL is skipped with a warning, as upstream logs and skips it.
Not covered: the node-wide keyring (``config.json`` / ``.dockercfg`` in the kubelet's directories) and
credential provider plugins; the caller fetches the Secrets and reports those it could not fetch.

Pure: Secrets come in already fetched, their data already decoded from base64; warnings go back to the caller.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import ipaddress
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from cri_client import types as cri

SECRET_TYPE_DOCKER_CONFIG_JSON = "kubernetes.io/dockerconfigjson"
DOCKER_CONFIG_JSON_KEY = ".dockerconfigjson"
SECRET_TYPE_DOCKERCFG = "kubernetes.io/dockercfg"
DOCKERCFG_KEY = ".dockercfg"

DEFAULT_REGISTRY_HOST = "index.docker.io"
"""keyring.go `defaultRegistryHost`: the key whose credentials Docker Hub images fall back to."""
DEFAULT_DOMAIN = "docker.io"
LEGACY_DEFAULT_DOMAIN = "index.docker.io"
OFFICIAL_REPO_PREFIX = "library/"
LOCALHOST = "localhost"

_CONTROL_CHARACTER = re.compile(r"[\x00-\x1f\x7f]")
# Go url `shouldEscape(c, encodeHost)` is false for these ASCII characters (and any non-ASCII one).
_HOST_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~!$&'()*+,;=:[]<>\"")
_BAD_PATH_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
_OPTIONAL_PORT = re.compile(r"(:[0-9]*)?")
_BASE64_PADDED = re.compile(r"[A-Za-z0-9+/]*={0,2}")
_BASE64_RAW = re.compile(r"[A-Za-z0-9+/]*")


class _MalformedError(ValueError):
    """A secret's docker config that upstream's json.Unmarshal would reject."""


def pull_secret_names(pod_spec: Mapping[str, Any]) -> list[str]:
    """The Secret names a pod spec's ``imagePullSecrets`` gives, in order (entries without a name left out)."""
    return [r["name"] for r in pod_spec.get("imagePullSecrets") or ()
            if isinstance(r, Mapping) and isinstance(r.get("name"), str) and r["name"]]


@dataclasses.dataclass(frozen=True, kw_only=True)
class PullSecret:
    """One Secret named in imagePullSecrets: its name (for warnings), type and base64-decoded data."""

    name: str
    type: str
    data: Mapping[str, bytes] = dataclasses.field(default_factory=dict, repr=False)


@dataclasses.dataclass(frozen=True)
class Keyring:
    """Credentials by registry key (``host[:port][/path]``), in the order the secrets and entries came."""

    entries: tuple[tuple[str, cri.AuthConfig], ...] = ()

    def lookup(self, image: str) -> list[cri.AuthConfig]:
        """Every credential for `image`, most specific key first (upstream `BasicDockerKeyring.Lookup`).

        The index is reverse-sorted so ``quay.io/coreos`` is tried before ``quay.io``; credentials under one
        key keep their order. Empty means "pull anonymously".
        """
        repository = repository_to_pull(image)
        found = [auth for key in sorted({key for key, _ in self.entries}, reverse=True)
                 if url_matches(key, repository)
                 for entry_key, auth in self.entries if entry_key == key]
        if found:
            return found
        if is_default_registry_match(repository):
            return [auth for key, auth in self.entries if key == DEFAULT_REGISTRY_HOST]
        return []


def make_keyring(secrets: Iterable[PullSecret]) -> tuple[Keyring, list[str]]:
    """The keyring of a pod's pull secrets, in imagePullSecrets order, and a warning per skipped secret or entry
    (upstream `MakeDockerKeyring` without the node keyring)."""
    entries: list[tuple[str, cri.AuthConfig]] = []
    warnings: list[str] = []
    for secret in secrets:
        if secret.type == SECRET_TYPE_DOCKER_CONFIG_JSON:
            data_key = DOCKER_CONFIG_JSON_KEY
        elif secret.type == SECRET_TYPE_DOCKERCFG:
            data_key = DOCKERCFG_KEY
        else:
            warnings.append(f"secret {secret.name!r} has type {secret.type!r}, not {SECRET_TYPE_DOCKER_CONFIG_JSON!r} "
                            f"or {SECRET_TYPE_DOCKERCFG!r}: ignored for image pulls")
            continue
        raw = secret.data.get(data_key)
        if not raw:
            warnings.append(f"secret {secret.name!r} of type {secret.type!r} has no {data_key} data: "
                            "ignored for image pulls")
            continue
        try:
            config = _docker_config(raw, wrapped=data_key == DOCKER_CONFIG_JSON_KEY)
        except _MalformedError as error:
            warnings.append(f"secret {secret.name!r} has an invalid {data_key} ({error}): ignored for image pulls")
            continue
        for registry, auth in config.items():
            try:
                entries.append((registry_key(registry), auth))
            except ValueError as error:
                # keyring.go Add: `Entry %q in dockercfg invalid (%v), ignoring`
                warnings.append(f"secret {secret.name!r}: entry {registry!r} in {data_key} invalid ({error}), ignoring")
    return Keyring(tuple(entries)), warnings


# -------------------------------------------------------------------------------------------- parsing


class _JsonObject(list[tuple[str, Any]]):
    """A JSON object as its (key, value) pairs in document order, duplicates kept, as Go's decoder walks it."""


def _reject_constant(name: str) -> Any:
    raise _MalformedError(f"invalid character {name[0]!r} looking for beginning of value")


def _load_json(raw: bytes) -> Any:
    try:
        return json.loads(raw.decode("utf-8"), object_pairs_hook=_JsonObject, parse_constant=_reject_constant)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise _MalformedError(f"not JSON: {error}") from None


def _fields(obj: _JsonObject, name: str) -> list[Any]:
    """The non-null values of the keys that name a Go struct field: json.Unmarshal matches case-insensitively."""
    return [value for key, value in obj if key.lower() == name and value is not None]


def _docker_config(raw: bytes, *, wrapped: bool) -> dict[str, cri.AuthConfig]:
    """Registry to credentials of `.dockerconfigjson` (`wrapped`: under ``auths``) or `.dockercfg`."""
    document = _load_json(raw)
    if document is None:
        return {}
    if not isinstance(document, _JsonObject):
        raise _MalformedError(f"expected an object, got {_json_kind(document)}")
    if not wrapped:
        return _auths(document)
    # DockerConfigJSON: Auths DockerConfig `json:"auths"`, HTTPHeaders map[string]string `json:"HttpHeaders"`
    for headers in _fields(document, "httpheaders"):
        if not isinstance(headers, _JsonObject) or any(not isinstance(v, str | None) for _, v in headers):
            raise _MalformedError("HttpHeaders must map strings to strings")
    result: dict[str, cri.AuthConfig] = {}
    for auths in _fields(document, "auths"):
        if not isinstance(auths, _JsonObject):
            raise _MalformedError(f"auths: expected an object, got {_json_kind(auths)}")
        result.update(_auths(auths))
    return result


def _auths(obj: _JsonObject) -> dict[str, cri.AuthConfig]:
    """A `DockerConfig` map; a repeated registry keeps its first position and its last value, as a Go map."""
    result: dict[str, cri.AuthConfig] = {}
    for registry, entry in obj:
        result[registry] = _entry(registry, entry)
    return result


def _entry(registry: str, entry: Any) -> cri.AuthConfig:
    """One `DockerConfigEntry`: username and password, replaced by those in ``auth`` when it is set."""
    if entry is None:
        return cri.AuthConfig()
    if not isinstance(entry, _JsonObject):
        raise _MalformedError(f"entry {registry!r}: expected an object, got {_json_kind(entry)}")
    values: dict[str, str] = {}
    for name in ("username", "password", "email", "auth"):
        for value in _fields(entry, name):
            if not isinstance(value, str):
                raise _MalformedError(f"entry {registry!r}: {name} must be a string, got {_json_kind(value)}")
            values[name] = value
    username, password = values.get("username", ""), values.get("password", "")
    if values.get("auth"):
        try:
            username, password = decode_auth(values["auth"])
        except ValueError as error:
            raise _MalformedError(f"entry {registry!r}: {error}") from None
    return cri.AuthConfig(username=username, password=password)


def _json_kind(value: Any) -> str:
    if isinstance(value, _JsonObject):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    return "a number"


def decode_auth(field: str) -> tuple[str, str]:
    """Username and password from an ``auth`` field, base64 of ``user:pass`` (upstream
    `decodeDockerConfigFieldAuth`): padded when it ends with ``=``, unpadded otherwise; ValueError if not.

    Decoded bytes that are not UTF-8 are refused too: they cannot travel in the CRI's string fields (upstream
    keeps them and fails when marshalling the pull request)."""
    text = field.replace("\r", "").replace("\n", "")  # Go's base64 decoder skips line breaks
    if field.strip().endswith("="):
        if not _BASE64_PADDED.fullmatch(text) or len(text) % 4:
            raise ValueError("illegal base64 data in auth field")
    elif not _BASE64_RAW.fullmatch(text) or len(text) % 4 == 1:
        raise ValueError("illegal base64 data in auth field")
    else:
        text += "=" * (-len(text) % 4)
    try:
        decoded = base64.b64decode(text, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        raise ValueError("illegal base64 data in auth field") from None
    username, colon, password = decoded.partition(":")
    if not colon:
        raise ValueError("unable to parse auth field, must be formatted as base64(username:password)")
    return username, password


# ------------------------------------------------------------------------------------------- matching


def registry_key(registry: str) -> str:
    """The index key of a config entry (upstream `BasicDockerKeyring.Add`): ``host[:port][/path]``, scheme and a
    leading ``/v1`` or ``/v2`` dropped; ValueError where Go's url.Parse fails."""
    if not registry.startswith(("https://", "http://")):
        registry = "https://" + registry
    host, path = _parse_url(registry)
    if path.startswith(("/v2/", "/v1/")):
        path = path[3:]
    return host + path if path and path != "/" else host


def url_matches(glob: str, target: str) -> bool:
    """Whether the schemeless `target` (an image repository) matches the key `glob` (upstream `URLsMatchStr`):
    same port, same number of host labels each matching as a glob, and the key's path a prefix of the target's."""
    try:
        glob_host, glob_path = _parse_url("https://" + glob)
        target_host, target_path = _parse_url("https://" + target)
    except ValueError:
        return False
    glob_labels, glob_port = _split_url_host(glob_host)
    target_labels, target_port = _split_url_host(target_host)
    if glob_port != target_port or len(glob_labels) != len(target_labels):
        return False
    if not target_path.startswith(glob_path):
        return False
    return all(glob_match(pattern, label) for pattern, label in zip(glob_labels, target_labels, strict=True))


def is_default_registry_match(image: str) -> bool:
    """Whether `image` pulls from Docker Hub by its name (upstream `isDefaultRegistryMatch`): no host part,
    ``docker.io`` / ``index.docker.io``, or a first component without ``.`` or ``:``."""
    first, slash, _ = image.partition("/")
    if not first:
        return False
    if not slash or first in (DEFAULT_DOMAIN, LEGACY_DEFAULT_DOMAIN):
        return True
    return "." not in first and ":" not in first


def repository_to_pull(image: str) -> str:
    """The image's repository, normalised as `parsers.ParseImageName` / `ParseNormalizedNamed`: Docker Hub names get
    ``docker.io/`` (and ``library/`` without a namespace), ``index.docker.io`` becomes ``docker.io``, and the tag
    and digest are dropped. Not validated: an invalid reference fails at the pull."""
    name = image.partition("@")[0]
    first, slash, rest = name.partition("/")
    if not slash:
        domain, remainder = DEFAULT_DOMAIN, OFFICIAL_REPO_PREFIX + name
    elif first == LEGACY_DEFAULT_DOMAIN:
        domain, remainder = DEFAULT_DOMAIN, rest
    elif first == LOCALHOST or "." in first or ":" in first or first.lower() != first:
        domain, remainder = first, rest
    else:
        domain, remainder = DEFAULT_DOMAIN, name
    if domain == DEFAULT_DOMAIN and "/" not in remainder:
        remainder = OFFICIAL_REPO_PREFIX + remainder
    return f"{domain}/{remainder.partition(':')[0]}"


def _parse_url(url: str) -> tuple[str, str]:
    """Host (with port) and unescaped path of an http(s) URL, failing where Go 1.26's url.Parse does (a subset:
    control characters; a ``[`` anywhere but first, or a bracketed host that is not IPv6; a bad port after the
    first colon; characters not allowed in a host, ``%`` included; a bad escape in the path)."""
    if _CONTROL_CHARACTER.search(url):
        raise ValueError("net/url: invalid control character in URL")
    rest = url.partition("#")[0].partition("://")[2].partition("?")[0]
    authority, slash, path = rest.partition("/")
    host = authority.rpartition("@")[2]
    bracket = host.rfind("[")
    if bracket > 0:
        raise ValueError("invalid IP-literal")
    if bracket == 0:
        close = host.rfind("]")
        if close < 0:
            raise ValueError("missing ']' in host")
        _check_port(host[close + 1:])
        try:
            ipaddress.IPv6Address(host[1:close].replace("%25", "%", 1))
        except ValueError as error:
            raise ValueError(f"invalid host: {error}") from None
    else:
        if ":" in host:
            _check_port(host[host.index(":"):])  # urlstrictcolons: the first colon starts the port
        bad = next((c for c in host if c.isascii() and c not in _HOST_CHARACTERS), None)
        if bad is not None:
            raise ValueError(f"invalid character {bad!r} in host name")
    if _BAD_PATH_ESCAPE.search(path):
        raise ValueError("invalid URL escape in path")
    return host, _unescape(slash + path)


def _check_port(colon_port: str) -> None:
    """Go url `validOptionalPort`: empty, or a colon and ASCII digits."""
    if not _OPTIONAL_PORT.fullmatch(colon_port):
        raise ValueError(f"invalid port {colon_port!r} after host")


def _unescape(path: str) -> str:
    """Percent-decoding of a URL path ('+' stays '+'); the escapes were validated."""
    return re.sub(r"(?:%[0-9A-Fa-f]{2})+",
                  lambda m: bytes.fromhex(m.group(0).replace("%", "")).decode("utf-8", "replace"), path)


def _split_url_host(host: str) -> tuple[list[str], str]:
    """Host labels and port (upstream `SplitURL`): net.SplitHostPort, or the whole host and no port when it fails."""
    split = _split_host_port(host)
    name, port = split if split is not None else (host, "")
    return name.split("."), port


def _split_host_port(hostport: str) -> tuple[str, str] | None:
    """Go `net.SplitHostPort`, None where it returns an error (no port, too many colons, stray brackets)."""
    colon = hostport.rfind(":")
    if colon < 0:
        return None
    start, end = 0, 0
    if hostport.startswith("["):
        close = hostport.find("]")
        if close < 0 or close + 1 != colon:
            return None
        host = hostport[1:close]
        start, end = 1, close + 1
    else:
        host = hostport[:colon]
        if ":" in host:
            return None
    if "[" in hostport[start:] or "]" in hostport[end:]:
        return None
    return host, hostport[colon + 1:]


# ----------------------------------------------------------------------------------------------- glob

_Token = tuple[str, Any]


def glob_match(pattern: str, name: str) -> bool:
    """Go `filepath.Match` on Linux: ``*``, ``?``, ``[a-z]`` / ``[^a-z]`` classes and ``\\`` escapes; ``*`` and
    ``?`` do not match ``/``. A malformed pattern matches nothing (upstream ignores the ErrBadPattern). Complete,
    though keys that pass `registry_key` can only use ``*``."""
    try:
        tokens = _glob_tokens(pattern)
    except ValueError:
        return False
    states = _star_closure({0}, tokens)
    for char in name:
        following: set[int] = set()
        for state in states:
            if state == len(tokens):
                continue
            kind, argument = tokens[state]
            if kind == "*":
                if char != "/":
                    following.add(state)
            elif (kind == "?" and char != "/") or (kind == "char" and char == argument) or (
                    kind == "class" and _in_class(char, argument)):
                following.add(state + 1)
        states = _star_closure(following, tokens)
        if not states:
            return False
    return len(tokens) in states


def _star_closure(states: set[int], tokens: list[_Token]) -> set[int]:
    """`states` plus the states after any run of ``*`` (a star may match nothing)."""
    result = set(states)
    for state in sorted(states):
        while state < len(tokens) and tokens[state][0] == "*":
            state += 1
            result.add(state)
    return result


def _in_class(char: str, argument: tuple[bool, list[tuple[str, str]]]) -> bool:
    negated, ranges = argument
    return any(low <= char <= high for low, high in ranges) != negated


def _glob_tokens(pattern: str) -> list[_Token]:
    """The pattern as tokens; ValueError where Go's Match returns ErrBadPattern."""
    tokens: list[_Token] = []
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char in "*?":
            tokens.append((char, None))
            i += 1
        elif char == "\\":
            if i + 1 >= len(pattern):
                raise ValueError("syntax error in pattern")
            tokens.append(("char", pattern[i + 1]))
            i += 2
        elif char == "[":
            i += 1
            negated = pattern.startswith("^", i)
            i += negated
            ranges: list[tuple[str, str]] = []
            while True:
                if i < len(pattern) and pattern[i] == "]" and ranges:
                    i += 1
                    break
                low, i = _class_char(pattern, i)
                high = low
                if pattern[i] == "-":
                    high, i = _class_char(pattern, i + 1)
                ranges.append((low, high))
            tokens.append(("class", (negated, ranges)))
        else:
            tokens.append(("char", char))
            i += 1
    return tokens


def _class_char(pattern: str, i: int) -> tuple[str, int]:
    """One possibly escaped character of a class (Go `getEsc`); something must follow it."""
    if i >= len(pattern) or pattern[i] in "-]":
        raise ValueError("syntax error in pattern")
    if pattern[i] == "\\":
        i += 1
        if i >= len(pattern):
            raise ValueError("syntax error in pattern")
    if i + 1 >= len(pattern):
        raise ValueError("syntax error in pattern")
    return pattern[i], i + 1


__all__ = [
    "DEFAULT_REGISTRY_HOST",
    "DOCKERCFG_KEY",
    "DOCKER_CONFIG_JSON_KEY",
    "SECRET_TYPE_DOCKERCFG",
    "SECRET_TYPE_DOCKER_CONFIG_JSON",
    "Keyring",
    "PullSecret",
    "decode_auth",
    "glob_match",
    "is_default_registry_match",
    "make_keyring",
    "registry_key",
    "repository_to_pull",
    "url_matches",
]
