"""Write kopflet/config/upstream_feature_gates.py: the names of every feature gate the pinned upstream kubelet knows.

    .venv/bin/python tests/data/gen_feature_gates.py           # rewrite the module
    .venv/bin/python tests/data/gen_feature_gates.py --check   # exit 1 if it is out of date

kopflet implements one gate (QOSReserved) and refuses every other name in ``featureGates`` / ``--feature-gates``;
this list lets it tell a gate upstream knows but kopflet cannot honour from a name upstream would refuse too
(``unrecognized feature gate: X``). The kubelet's gate registry (``utilfeature.DefaultMutableFeatureGate``) is, at
start-up, the union of:

- ``defaultVersionedKubernetesFeatureGates`` of k8s.io/kubernetes ``pkg/features/kube_features.go`` (its keys name
  constants of that package and of the apiserver, apiextensions-apiserver, controller-manager and zpages feature
  packages it imports);
- client-go's ``defaultVersionedKubernetesFeatureGates`` (``features/known_features.go``), added by the same file's
  ``init`` through ``AddVersionedFeaturesToExistingFeatureGates``;
- component-base's logs API gates (``logs/api/v1/kube_features.go`` ``featureGates()``), added by cmd/kubelet's
  ``init`` (``logsapi.AddFeatureGates``), and its zpages gates (``zpages/features``);
- the two special gates of component-base's ``featuregate`` package, ``AllAlpha`` and ``AllBeta``.

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
SPECIAL_GATES = ("AllAlpha", "AllBeta")  # component-base featuregate allAlphaGate, allBetaGate

_CONST = re.compile(r'^\s*(\w+)\s+(?:(?:featuregate\.)?Feature\s+)?=\s*(?:featuregate\.Feature\()?"([^"]+)"',
                    re.MULTILINE)
"""``Name featuregate.Feature = "Name"``, untyped in the typed block (``ReloadKubeletClientCAFile = "..."``), or
converted (``SystemdWatchdog = featuregate.Feature("SystemdWatchdog")``)."""
_KEY = re.compile(r"^\t\t?(\w+(?:\.\w+)?): \{", re.MULTILINE)
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


def _map_keys(text: str, opening: str) -> list[str]:
    """The keys of the Go map literal that starts at `opening` (its first ``{`` ends the line) and ends at the
    first line that closes it at its own indentation."""
    start = text.index(opening)
    line_start = text.rfind("\n", 0, start) + 1
    indent = text[line_start:start] if text[line_start:start].strip() == "" else ""
    end = text.index(f"\n{indent}}}", start)
    return _KEY.findall(text[start:end])


def _imports(text: str) -> dict[str, str]:
    """Import alias (or last path element) -> import path, from the file's import block."""
    block = text[text.index("import ("):]
    block = block[:block.index("\n)")]
    aliases = {}
    for alias, path in _IMPORT.findall(block):
        aliases[alias or path.rsplit("/", 1)[-1]] = path
    return aliases


def _resolve(keys: list[str], own: dict[str, str], imports: dict[str, str], staging: str) -> set[str]:
    names = set()
    for key in keys:
        alias, dot, constant = key.partition(".")
        if not dot:
            names.add(own[key])
            continue
        names.add(_constants(package_dir(imports[alias], staging))[constant])
    return names


def gate_names(version: str, staging: str) -> list[str]:
    names: set[str] = set(SPECIAL_GATES)
    features = kubernetes_dir(version) / "pkg" / "features"
    text = (features / "kube_features.go").read_text(encoding="utf-8")
    keys = _map_keys(text, "var defaultVersionedKubernetesFeatureGates = map[")
    names |= _resolve(keys, _constants(features), _imports(text), staging)
    for import_path, file, opening in (
        ("k8s.io/client-go/features", "known_features.go", "var defaultVersionedKubernetesFeatureGates = map["),
        ("k8s.io/component-base/logs/api/v1", "kube_features.go", "return map["),
        ("k8s.io/component-base/zpages/features", "kube_features.go", "return map["),
    ):
        directory = package_dir(import_path, staging)
        keys = _map_keys((directory / file).read_text(encoding="utf-8"), opening)
        names |= _resolve(keys, _constants(directory), {}, staging)
    return sorted(names)


def render(version: str, staging: str) -> str:
    lines = [
        f'"""The feature gates the upstream kubelet {version} knows (its `--feature-gates` registry), by name.',
        "",
        "Generated by tests/data/gen_feature_gates.py from the Go module cache: do not edit. kopflet implements only",
        "QOSReserved (`kopflet.config.feature_gates`); this list tells a gate it cannot honour from a name upstream",
        "would refuse too. Pure data.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        f'KUBERNETES_VERSION = "{version}"',
        "",
        "UPSTREAM_FEATURE_GATES: frozenset[str] = frozenset({",
        *(f'    "{name}",' for name in gate_names(version, staging)),
        "})",
        "",
        '__all__ = ["KUBERNETES_VERSION", "UPSTREAM_FEATURE_GATES"]',
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
    print(f"wrote {TARGET.relative_to(REPO)}: {text.count(chr(10) + '    ')} gates")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
