"""Write kopflet/config/upstream_feature_gates.py: the pinned upstream kubelet's feature gates and defaults.

    .venv/bin/python tests/data/gen_feature_gates.py           # rewrite the module
    .venv/bin/python tests/data/gen_feature_gates.py --check   # exit 1 if it is out of date

kopflet implements three gates (QOSReserved, LoggingAlphaOptions, LoggingBetaOptions); every other gate it takes
only at the pinned release's default (a no-op: kopflet behaves as upstream does with the gate at its default).
This list gives each name upstream knows its default and whether it is locked to it, so kopflet can tell a no-op
from a value it cannot honour, and both from a name upstream would refuse too (``unrecognized feature gate: X``).
The kubelet's gate registry (``utilfeature.DefaultMutableFeatureGate``) is, at start-up, the union of:

- ``defaultVersionedKubernetesFeatureGates`` of k8s.io/kubernetes ``pkg/features/kube_features.go`` (its keys name
  constants of that package and of the apiserver, apiextensions-apiserver, controller-manager and zpages feature
  packages it imports);
- client-go's ``defaultVersionedKubernetesFeatureGates`` (``features/known_features.go``), added by the same file's
  ``init`` through ``AddVersionedFeaturesToExistingFeatureGates``;
- component-base's logs API gates (``logs/api/v1/kube_features.go`` ``featureGates()``), added by cmd/kubelet's
  ``init`` (``logsapi.AddFeatureGates``), and its zpages gates (``zpages/features``);
- the two special gates of component-base's ``featuregate`` package, ``AllAlpha`` and ``AllBeta`` (default false).

A gate's default is that of its spec at the kubelet's emulation version, the binary's minor (component-base
``featureSpecAtEmulationAndMinCompatVersion``): the last ``VersionedSpecs`` entry whose ``Version`` is at most that
minor and whose ``MinCompatibilityVersion``, if any, is at most the minor before it (the default minimum
compatibility version). A gate with no such entry is pre-alpha there, and upstream refuses any value for it.

The sources are read from the Go module cache (``$GOMODCACHE`` or ``~/go/pkg/mod``) at the versions pinned in
`devstack/versions.env`. The output is checked in, so the agent and the unit tests need no Go module cache
(tests/unit/test_feature_gates.py compares it with this script's output when the cache is there).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TARGET = REPO / "kopflet" / "config" / "upstream_feature_gates.py"
SPECIAL_GATES = ("AllAlpha", "AllBeta")  # component-base featuregate allAlphaGate, allBetaGate: default false

_CONST = re.compile(r'^\s*(\w+)\s+(?:(?:featuregate\.)?Feature\s+)?=\s*(?:featuregate\.Feature\()?"([^"]+)"',
                    re.MULTILINE)
"""``Name featuregate.Feature = "Name"``, untyped in the typed block (``ReloadKubeletClientCAFile = "..."``), or
converted (``SystemdWatchdog = featuregate.Feature("SystemdWatchdog")``)."""
_KEY = re.compile(r"^\t\t?(\w+(?:\.\w+)?): \{", re.MULTILINE)
_SPEC = re.compile(r'\{Version: version\.MustParse\("(\d+)\.(\d+)"\),([^{}]*)\}')
"""One ``FeatureSpec`` of a ``VersionedSpecs`` list: its version, then its other fields."""
_MIN_COMPAT = re.compile(r'MinCompatibilityVersion: version\.MustParse\("(\d+)\.(\d+)"\)')
_COMMENT = re.compile(r"//[^\n]*")
_IMPORT = re.compile(r'^\s*(\w+)?\s*"([^"]+)"\s*$', re.MULTILINE)


def pinned_versions() -> tuple[str, str]:
    """KUBERNETES_VERSION and KUBERNETES_STAGING_VERSION from devstack/versions.env."""
    values = {}
    for line in (REPO / "devstack" / "versions.env").read_text(encoding="utf-8").splitlines():
        key, _, value = line.partition("=")
        values[key.strip()] = value.strip()
    try:
        return values["KUBERNETES_VERSION"], values["KUBERNETES_STAGING_VERSION"]
    except KeyError as exc:
        raise SystemExit(f"devstack/versions.env has no {exc.args[0]}") from None


def module_cache() -> Path:
    return Path(os.environ.get("GOMODCACHE") or Path.home() / "go" / "pkg" / "mod")


def kubernetes_dir(version: str) -> Path:
    return module_cache() / f"k8s.io/kubernetes@{version}"


def package_dir(import_path: str, staging_version: str) -> Path:
    """The directory of a k8s.io staging package (``k8s.io/apiserver/pkg/features``) in the module cache."""
    parts = import_path.split("/")
    return module_cache() / f"{parts[0]}/{parts[1]}@{staging_version}" / "/".join(parts[2:])


def _constants(directory: Path) -> dict[str, str]:
    """Go constant name -> gate name, over the package's non-test files."""
    found: dict[str, str] = {}
    for path in sorted(directory.glob("*.go")):
        if not path.name.endswith("_test.go"):
            found.update(_CONST.findall(path.read_text(encoding="utf-8")))
    return found


Gate = tuple[bool, bool, bool]
"""(default, locked to its default, pre-alpha) at the emulation version."""


def _spec_at(specs: str, emulation: tuple[int, int]) -> Gate:
    """The gate's spec at `emulation`, from the text of its ``VersionedSpecs`` (comments stripped)."""
    min_compat = (emulation[0], emulation[1] - 1)
    chosen: Gate = (False, False, True)  # no entry: upstream's PreAlpha spec, default false
    for major, minor, fields in _SPEC.findall(specs):
        if (int(major), int(minor)) > emulation:
            continue
        needs = _MIN_COMPAT.search(fields)
        if needs and (int(needs[1]), int(needs[2])) > min_compat:
            continue
        default = re.search(r"\bDefault: (true|false)\b", fields)
        if default is None:
            raise SystemExit(f"a feature spec without a Default: {fields!r}")
        chosen = (default[1] == "true", bool(re.search(r"\bLockToDefault: true\b", fields)),
                  "featuregate.PreAlpha" in fields)
    return chosen


def _map_specs(text: str, opening: str, emulation: tuple[int, int]) -> dict[str, Gate]:
    """Key -> spec at `emulation`, of the Go map literal that starts at `opening` (its first ``{`` ends the line)
    and ends at the first line that closes it at its own indentation. Entries are in ascending version order, as
    component-base requires."""
    start = text.index(opening)
    line_start = text.rfind("\n", 0, start) + 1
    indent = text[line_start:start] if text[line_start:start].strip() == "" else ""
    end = text.index(f"\n{indent}}}", start)
    body = _COMMENT.sub("", text[start:end])
    keys = list(_KEY.finditer(body))
    specs = {}
    for i, key in enumerate(keys):
        stop = keys[i + 1].start() if i + 1 < len(keys) else len(body)
        specs[key[1]] = _spec_at(body[key.end():stop], emulation)
    return specs


def _imports(text: str) -> dict[str, str]:
    """Import alias (or last path element) -> import path, from the file's import block."""
    block = text[text.index("import ("):]
    block = block[:block.index("\n)")]
    aliases = {}
    for alias, path in _IMPORT.findall(block):
        aliases[alias or path.rsplit("/", 1)[-1]] = path
    return aliases


def _resolve(specs: dict[str, Gate], own: dict[str, str], imports: dict[str, str], staging: str) -> dict[str, Gate]:
    gates = {}
    for key, spec in specs.items():
        alias, dot, constant = key.partition(".")
        name = _constants(package_dir(imports[alias], staging))[constant] if dot else own[key]
        gates[name] = spec
    return gates


def emulation_version(version: str) -> tuple[int, int]:
    """The kubelet's default emulation version: the binary's major.minor (``v1.37.1`` -> 1.37)."""
    major, minor = version.lstrip("v").split(".")[:2]
    return int(major), int(minor)


def gates(version: str, staging: str) -> dict[str, Gate]:
    """Every gate name of the kubelet's registry -> its spec at the emulation version, by name."""
    emulation = emulation_version(version)
    found: dict[str, Gate] = dict.fromkeys(SPECIAL_GATES, (False, False, False))
    features = kubernetes_dir(version) / "pkg" / "features"
    text = (features / "kube_features.go").read_text(encoding="utf-8")
    specs = _map_specs(text, "var defaultVersionedKubernetesFeatureGates = map[", emulation)
    found.update(_resolve(specs, _constants(features), _imports(text), staging))
    for import_path, file, opening in (
        ("k8s.io/client-go/features", "known_features.go", "var defaultVersionedKubernetesFeatureGates = map["),
        ("k8s.io/component-base/logs/api/v1", "kube_features.go", "return map["),
        ("k8s.io/component-base/zpages/features", "kube_features.go", "return map["),
    ):
        directory = package_dir(import_path, staging)
        specs = _map_specs((directory / file).read_text(encoding="utf-8"), opening, emulation)
        found.update(_resolve(specs, _constants(directory), {}, staging))
    return dict(sorted(found.items()))


def gate_names(version: str, staging: str) -> list[str]:
    return list(gates(version, staging))


def _frozenset(variable: str, names: list[str]) -> list[str]:
    if not names:
        return [f"{variable}: frozenset[str] = frozenset()"]
    return [f"{variable}: frozenset[str] = frozenset({{", *(f'    "{name}",' for name in names), "})"]


def render(version: str, staging: str) -> str:
    found = gates(version, staging)
    emulation = ".".join(map(str, emulation_version(version)))
    lines = [
        f'"""The feature gates the upstream kubelet {version} knows (its `--feature-gates` registry), and defaults.',
        "",
        "Generated by tests/data/gen_feature_gates.py from the Go module cache: do not edit. kopflet implements only",
        "QOSReserved, LoggingAlphaOptions and LoggingBetaOptions (`kopflet.config.feature_gates`) and takes any other",
        "gate only at its default here; these tell a no-op from a value it cannot honour, and both from a name",
        "upstream would refuse too. Pure data.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from collections.abc import Mapping",
        "from types import MappingProxyType",
        "",
        f'KUBERNETES_VERSION = "{version}"',
        "",
        f'EMULATION_VERSION = "{emulation}"',
        '"""The kubelet\'s default emulation version (the binary\'s minor), at which the defaults below hold."""',
        "",
        "UPSTREAM_FEATURE_GATES: Mapping[str, bool] = MappingProxyType({",
        *(f'    "{name}": {default},' for name, (default, _, _) in found.items()),
        "})",
        '"""Every gate name upstream\'s registry knows -> its default at the emulation version."""',
        "",
        *_frozenset("LOCKED_TO_DEFAULT", [name for name, (_, locked, _) in found.items() if locked]),
        '"""The gates upstream refuses to set to anything but their default (``LockToDefault``)."""',
        "",
        *_frozenset("PRE_ALPHA", [name for name, (_, _, pre_alpha) in found.items() if pre_alpha]),
        '"""The gates pre-alpha at the emulation version, which upstream refuses to set at all."""',
        "",
        '__all__ = ["EMULATION_VERSION", "KUBERNETES_VERSION", "LOCKED_TO_DEFAULT", "PRE_ALPHA", '
        '"UPSTREAM_FEATURE_GATES"]',
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    version, staging = pinned_versions()
    if not (kubernetes_dir(version) / "pkg" / "features" / "kube_features.go").is_file():
        print(f"{kubernetes_dir(version)} is missing: fetch the module (go mod download k8s.io/kubernetes@{version})",
              file=sys.stderr)
        return 2
    text = render(version, staging)
    if "--check" in argv:
        if not TARGET.is_file() or TARGET.read_text(encoding="utf-8") != text:
            print(f"{TARGET.relative_to(REPO)} is out of date: run {Path(__file__).relative_to(REPO)}",
                  file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text, encoding="utf-8")
    print(f"wrote {TARGET.relative_to(REPO)}: {len(gates(version, staging))} gates")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
