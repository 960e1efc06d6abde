"""Write tests/data/pod_fields_<version>.json: every field path of the pinned Kubernetes PodSpec.

    .venv/bin/python tests/data/gen_pod_fields.py           # rewrite the file
    .venv/bin/python tests/data/gen_pod_fields.py --check   # exit 1 if it is out of date

Reads the apiserver's own OpenAPI v3 document of the core group (``api/openapi-spec/v3/api__v1_openapi.json``) from
the pinned ``k8s.io/kubernetes`` module in the Go module cache (the version is `devstack/versions.env`'s
KUBERNETES_VERSION; ``$GOMODCACHE`` or ``~/go/pkg/mod``). The output is checked in, so the unit tests that read it
(tests/unit/test_pod_fields.py) need no Go module cache.

The walk starts at ``io.k8s.api.core.v1.PodSpec`` as ``spec`` and follows every property into the object types it
references, an array of objects written ``[]`` (``spec.containers[].securityContext.procMount``; an array of
scalars is one field: ``spec.containers[].args``). Every object field is listed, the intermediate ones too. It stops
at:

- scalars, arrays of scalars and maps (``nodeSelector``, ``resources.limits``: maps of strings or Quantities);
- the apimachinery types, which kopflet (like the kubelet) treats as values: ``Quantity`` and ``IntOrString``
  (scalars on the wire), ``LabelSelector`` (only the scheduler and the trust-bundle projection read it) and
  ``ObjectMeta`` (of an ephemeral volume's claim template, which the PVC controller reads).

Only core/v1 types are walked; a type met again below itself would stop the walk there (there is none in PodSpec).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
ROOT_TYPE = "io.k8s.api.core.v1.PodSpec"
CORE_PREFIX = "io.k8s.api.core.v1."
OPENAPI = "api/openapi-spec/v3/api__v1_openapi.json"
LEAF_TYPES = {
    "io.k8s.apimachinery.pkg.api.resource.Quantity": "Quantity",
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": "IntOrString",
    "io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector": "LabelSelector",
    "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": "ObjectMeta",
}


def kubernetes_version() -> str:
    """KUBERNETES_VERSION from devstack/versions.env, the one place the pinned versions live."""
    for line in (REPO / "devstack" / "versions.env").read_text(encoding="utf-8").splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "KUBERNETES_VERSION":
            return value.strip()
    raise SystemExit("devstack/versions.env has no KUBERNETES_VERSION")


def target(version: str) -> Path:
    return HERE / f"pod_fields_{version}.json"


def openapi_path(version: str) -> Path:
    cache = Path(os.environ.get("GOMODCACHE") or Path.home() / "go" / "pkg" / "mod")
    return cache / f"k8s.io/kubernetes@{version}" / OPENAPI


def _ref(prop: Mapping[str, Any]) -> str | None:
    if "$ref" in prop:
        return str(prop["$ref"]).rsplit("/", 1)[-1]
    for item in prop.get("allOf") or ():
        found = _ref(item)
        if found:
            return found
    return None


def _describe(prop: Mapping[str, Any]) -> tuple[str, str | None, str]:
    """(type text, the core type to walk into or None, suffix for the path: ``[]`` for arrays)."""
    ref = _ref(prop)
    if ref is not None:
        if ref in LEAF_TYPES:
            return LEAF_TYPES[ref], None, ""
        return ref.removeprefix(CORE_PREFIX), ref, ""
    kind = prop.get("type", "")
    if kind == "array":
        inner, walk, _ = _describe(prop.get("items") or {})
        return f"[]{inner}", walk, "[]" if walk is not None else ""
    if kind == "object":
        inner, _, _ = _describe(prop.get("additionalProperties") or {})
        return f"map[string]{inner or 'any'}", None, ""
    fmt = prop.get("format")
    return f"{kind}({fmt})" if fmt else str(kind), None, ""


def walk(schemas: Mapping[str, Any], type_name: str, path: str, seen: tuple[str, ...]) -> Iterator[dict[str, str]]:
    for name, prop in sorted((schemas[type_name].get("properties") or {}).items()):
        text, inner, suffix = _describe(prop)
        field = f"{path}.{name}"
        yield {"path": field + suffix, "type": text}
        if inner is not None and inner.startswith(CORE_PREFIX) and inner not in seen:
            yield from walk(schemas, inner, field + suffix, (*seen, inner))


def render(version: str) -> str:
    document = json.loads(openapi_path(version).read_text(encoding="utf-8"))
    schemas = document["components"]["schemas"]
    fields = list(walk(schemas, ROOT_TYPE, "spec", (ROOT_TYPE,)))
    data = {
        "kubernetes": version,
        "source": f"k8s.io/kubernetes@{version}/{OPENAPI}",
        "root": f"{ROOT_TYPE} as spec",
        "leaf_types": sorted(LEAF_TYPES.values()),
        "generator": "tests/data/gen_pod_fields.py",
        "fields": fields,
    }
    head = json.dumps({k: v for k, v in data.items() if k != "fields"}, indent=1)
    rows = ",\n".join("  " + json.dumps(field) for field in fields)
    return head[:-2] + ',\n "fields": [\n' + rows + "\n ]\n}\n"  # one field a line: readable diffs


def main(argv: list[str]) -> int:
    version = kubernetes_version()
    if not openapi_path(version).is_file():
        print(f"{openapi_path(version)} is missing: fetch the module (go mod download k8s.io/kubernetes@{version})",
              file=sys.stderr)
        return 2
    text = render(version)
    if "--check" in argv:
        if not target(version).is_file() or target(version).read_text(encoding="utf-8") != text:
            print(f"{target(version).relative_to(REPO)} is out of date: run {Path(__file__).relative_to(REPO)}",
                  file=sys.stderr)
            return 1
        return 0
    target(version).write_text(text, encoding="utf-8")
    count = len(json.loads(text)["fields"])
    print(f"wrote {target(version).relative_to(REPO)}: {count} fields")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
