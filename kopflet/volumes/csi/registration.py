"""
The rules of CSI driver registration (upstream pkg/volume/csi csi_plugin.go `RegistrationHandler`,
csi_drivers_store.go, and apimachinery's util/version it uses): which versions a driver may offer, and the
registry of the drivers registered on this node (name → endpoint and highest supported CSI version).

- `validate_versions` is upstream ``validateVersions``: an empty list, a list without a v1.x version, or a driver
  already registered under that name with the same or a higher version are refused with upstream's messages
  (prefixed ``kubernetes.io/csi: `` as upstream's ``log``). `ValidatePlugin` wraps its error in
  ``validation failed for CSI Driver <name> at endpoint <endpoint>: ...``.
- `highest_supported_version` is util/version ``HighestSupportedVersion`` over ``ParseGeneric``: versions whose
  major is above 1 are skipped, the highest of the rest must be a 1.x.
- `DriversStore` is upstream's ``DriversStore`` (the map every CSI component reads a driver's socket from).

Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Sequence

from kopflet.gotext import go_quote, go_string_slice

CSI_PLUGIN_NAME = "kubernetes.io/csi"
"""Upstream CSIPluginName: the in-tree plugin's name, the prefix of its log lines and errors."""

_UINT64_MAX = (1 << 64) - 1
# util/version versionMatchRE ``^\s*v?([0-9]+(?:\.[0-9]+)*)(.*)*$``: Go's \s is [\t\n\f\r ] and its $ (no
# multi-line) the end of the text; ``(.*)*`` matches what ``.*`` does (RE2 never backtracks; Python's would).
_VERSION = re.compile(r"[\t\n\f\r ]*v?([0-9]+(?:\.[0-9]+)*).*\Z")


def log(message: str) -> str:
    """Upstream csi_util.go ``log``: the plugin's name before the message."""
    return f"{CSI_PLUGIN_NAME}: {message}"


class VersionError(ValueError):
    """A version string util/version cannot parse, or a version list without a usable one (upstream's texts)."""


@functools.total_ordering
@dataclasses.dataclass(frozen=True, eq=False)
class Version:
    """util/version ``Version`` as ParseGeneric makes it: the numeric components only (what follows them is
    dropped), compared component by component with missing ones taken as 0 (1.4 == 1.4.0)."""

    components: tuple[int, ...]

    @classmethod
    def parse_generic(cls, text: str) -> Version:
        """Upstream ParseGeneric: two or more dot-separated numbers, the first without a leading zero, optionally
        after a ``v``, then anything."""
        match = _VERSION.match(text)
        if match is None:
            raise VersionError(f"could not parse {go_quote(text)} as version")
        parts = match.group(1).split(".")
        if len(parts) < 2:
            raise VersionError(f"illegal version string {go_quote(text)}")
        if parts[0].startswith("0") and parts[0] != "0":
            raise VersionError(f"illegal zero-prefixed version component {go_quote(parts[0])} in {go_quote(text)}")
        for part in parts:
            if int(part) > _UINT64_MAX:
                raise VersionError(f"illegal non-numeric version component {go_quote(part)} in {go_quote(text)}: "
                                   f"strconv.ParseUint: parsing {go_quote(part)}: value out of range")
        return cls(tuple(int(part) for part in parts))

    @property
    def major(self) -> int:
        return self.components[0]

    def _compare(self, other: Version) -> int:
        """util/version compareInternal for generic versions."""
        for mine, theirs in zip(self.components, other.components, strict=False):
            if mine != theirs:
                return 1 if mine > theirs else -1
        rest_mine, rest_theirs = self.components[len(other.components):], other.components[len(self.components):]
        if any(rest_mine):
            return 1
        if any(rest_theirs):
            return -1
        return 0

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Version) and self._compare(other) == 0

    def __hash__(self) -> int:
        components = list(self.components)
        while len(components) > 1 and components[-1] == 0:
            components.pop()
        return hash(tuple(components))

    def __lt__(self, other: Version) -> bool:
        return self._compare(other) < 0

    def __str__(self) -> str:
        return ".".join(str(c) for c in self.components)


def highest_supported_version(versions: Sequence[str]) -> Version:
    """util/version HighestSupportedVersion: the highest version of major 0 or 1 (unparsable ones skipped, the last
    parse error kept for the message), which must be a 1.x; VersionError otherwise."""
    if not versions:
        raise VersionError("empty array for supported versions")
    highest: Version | None = None
    last_error: VersionError | None = None
    for text in reversed(versions):
        try:
            version = Version.parse_generic(text)
        except VersionError as exc:
            last_error = exc
            continue
        if version.major > 1:
            continue
        if highest is None or highest < version:
            highest = version
    if highest is None:
        raise VersionError(f"could not find a highest supported version from versions ({go_string_slice(versions)}) "
                           f"reported: {last_error if last_error is not None else '<nil>'}")
    if highest.major != 1:
        raise VersionError(f"highest supported version reported is {highest}, must be v1.x")
    return highest


@dataclasses.dataclass(frozen=True)
class Driver:
    """Upstream csi Driver: a registered driver's endpoint (its socket) and highest supported CSI version."""

    endpoint: str
    highest_supported_version: Version


class DriversStore:
    """Upstream DriversStore: the CSI drivers registered on this node, by name. One per agent (upstream's is a
    package variable); no I/O."""

    def __init__(self) -> None:
        self._drivers: dict[str, Driver] = {}

    def get(self, name: str) -> Driver | None:
        return self._drivers.get(name)

    def set(self, name: str, driver: Driver) -> None:
        self._drivers[name] = driver

    def delete(self, name: str) -> None:
        self._drivers.pop(name, None)

    def clear(self) -> None:
        self._drivers.clear()

    def list(self) -> list[str]:
        return list(self._drivers)


class ValidationError(ValueError):
    """A driver refused at registration; the text is upstream's."""


def _go_quoted_slice(items: Sequence[str]) -> str:
    """fmt's ``%q`` of a ``[]string``: ``["1.0.0" "2.0.0"]``."""
    return "[" + " ".join(go_quote(item) for item in items) + "]"


def validate_versions(caller: str, name: str, versions: Sequence[str], existing: Driver | None) -> Version:
    """Upstream validateVersions (`caller` "ValidatePlugin" or "RegisterPlugin"): the driver's highest supported
    version, or ValidationError with upstream's text."""
    if not versions:
        raise ValidationError(log(f"{caller} for CSI driver {go_quote(name)} failed. Plugin returned an empty list "
                                  f"for supported versions"))
    try:
        highest = highest_supported_version(versions)
    except VersionError as exc:
        raise ValidationError(log(f"{caller} for CSI driver {go_quote(name)} failed. None of the versions specified "
                                  f"{_go_quoted_slice(versions)} are supported. err={exc}")) from None
    if existing is not None and not existing.highest_supported_version < highest:
        raise ValidationError(log(f"{caller} for CSI driver {go_quote(name)} failed. Another driver with the same "
                                  f"name is already registered with a higher supported version: "
                                  f"{go_quote(str(existing.highest_supported_version))}"))
    return highest


def validation_failed(name: str, endpoint: str, error: str) -> str:
    """Upstream ValidatePlugin's wrapping of validateVersions' error."""
    return f"validation failed for CSI Driver {name} at endpoint {endpoint}: {error}"


__all__ = [
    "CSI_PLUGIN_NAME", "Driver", "DriversStore", "ValidationError", "Version", "VersionError",
    "highest_supported_version", "log", "validate_versions", "validation_failed",
]
