"""Every field of the pinned PodSpec is handled, refused or not the kubelet's (kopflet.api.fields), and every refusal
the table states is what kopflet's pure code does (issue 19: a field the agent cannot honour is never ignored).

The field list is tests/data/pod_fields_<version>.json, generated from the apiserver's OpenAPI by
tests/data/gen_pod_fields.py (checked here against the Go module cache when it is on the machine).
"""

from __future__ import annotations

import asyncio
import copy
import importlib
import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import pytest

from kopflet import paths
from kopflet.api import fields, spec, unsupported
from kopflet.api.fields import FIELDS
from kopflet.kuberuntime import sandbox_config
from kopflet.lifecycle import admission
from kopflet.lifecycle.hooks import HookRunner
from kopflet.volumes import plugins
from tests.unit.test_unsupported import BASE, NODE, container_errors, make_pod

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"


def _generator() -> Any:
    loaded = importlib.util.spec_from_file_location("gen_pod_fields", DATA / "gen_pod_fields.py")
    assert loaded is not None and loaded.loader is not None
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)
    return module


GEN = _generator()
VERSION = GEN.kubernetes_version()
SCHEMA = json.loads(GEN.target(VERSION).read_text(encoding="utf-8"))
PATHS = [f["path"] for f in SCHEMA["fields"]]
PATH_SET = set(PATHS)
LEAVES = [p for p in PATHS if not any(q.startswith(p + ".") for q in PATHS)]
LEAF_SET = set(LEAVES)


# ----------------------------------------------------------------------------------------------- the list


def test_the_field_list_is_of_the_pinned_release() -> None:
    assert SCHEMA["kubernetes"] == VERSION
    assert len(PATHS) == len(PATH_SET)
    for expected in ("spec.containers[].securityContext.procMount", "spec.volumes[].nfs.server",
                     "spec.initContainers[].lifecycle.preStop.sleep.seconds",
                     "spec.ephemeralContainers[].targetContainerName",
                     "spec.securityContext.sysctls[].name", "spec.containers[].args"):
        assert expected in PATH_SET


@pytest.mark.skipif(not GEN.openapi_path(VERSION).is_file(), reason="the pinned module is not in the Go module cache")
def test_the_field_list_is_generated_from_the_pinned_openapi() -> None:
    assert GEN.target(VERSION).read_text(encoding="utf-8") == GEN.render(VERSION), \
        "tests/data/pod_fields_*.json is out of date: run tests/data/gen_pod_fields.py"


# ---------------------------------------------------------------------------------------- the classification


def test_every_field_of_the_schema_is_classified() -> None:
    missing = [p for p in LEAVES if fields.covering(p) is None]
    assert not missing, "fields neither handled, refused nor n/a in kopflet/api/fields.py:\n" + "\n".join(missing)


def test_every_classified_field_is_in_the_schema() -> None:
    stale = [p for p in FIELDS if p not in PATH_SET]
    assert not stale, "entries of kopflet/api/fields.py the pinned schema does not have:\n" + "\n".join(stale)


def test_entries_are_leaves_or_subtrees() -> None:
    """A non-leaf entry must say it covers its subtree; a leaf entry must not (it would hide nothing)."""
    for path, field in FIELDS.items():
        assert field.subtree == (path not in LEAF_SET), path


@pytest.mark.parametrize("path", sorted(FIELDS))
def test_entries_are_well_formed(path: str) -> None:
    field = FIELDS[path]
    assert field.status in fields.STATUSES
    assert field.where
    if field.status == fields.REFUSED:
        assert field.refusal is not None and field.why, "a refusal needs its example and its reason"
    if field.status == fields.NOT_APPLICABLE:
        assert field.refusal is None and field.why
        assert field.where.startswith(fields.K8S), "n/a cites upstream"
    if field.refusal is not None:
        assert field.refusal.stage in fields.STAGES and field.refusal.says


_NAME = re.compile(r"\bkopflet(?:\.[A-Za-z_]\w*)+")


def _resolves(dotted: str) -> bool:
    """A module (``kopflet.volumes.plugins``) or an attribute of one (``...plugins.container_mounts``)."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        try:
            target: Any = importlib.import_module(".".join(parts[:end]))
        except ImportError:
            continue
        for attr in parts[end:]:
            if not hasattr(target, attr):
                return False
            target = getattr(target, attr)
        return True
    return False


def test_the_code_cited_exists() -> None:
    cited = sorted({name for field in FIELDS.values() for name in _NAME.findall(field.where)})
    assert cited
    assert [name for name in cited if not _resolves(name)] == []


_UPSTREAM = re.compile(re.escape(fields.K8S) + r"([\w./-]+)")


@pytest.mark.skipif(not GEN.openapi_path(VERSION).is_file(), reason="the pinned module is not in the Go module cache")
def test_the_upstream_code_cited_exists() -> None:
    module = GEN.openapi_path(VERSION).parents[3]  # <module cache>/k8s.io/kubernetes@<version>
    cited = sorted({match.rstrip(".,;") for field in FIELDS.values() for match in _UPSTREAM.findall(field.where)})
    assert cited
    assert [path for path in cited if not (module / path).exists()] == []


def test_the_counts() -> None:
    """Every leaf counted once, by the entry that covers it (the report quotes these)."""
    counts = {status: 0 for status in fields.STATUSES}
    for path in LEAVES:
        counts[FIELDS[fields.covering(path) or ""].status] += 1
    assert sum(counts.values()) == len(LEAVES)
    assert all(counts.values())


# ---------------------------------------------------------------------------------------------- the refusals

LAYOUT = paths.Layout("/var/lib/kopflet")
REFUSALS = sorted(path for path, field in FIELDS.items() if field.refusal is not None)


def _fetched(names: frozenset[str]) -> dict[str, dict[str, bytes]]:
    return {name: {"k": b"v"} for name in names}


def _refusal_text(stage: str, pod: spec.Pod) -> str:
    """What `stage` says about the pod: the rejection's reason and message, or the error's text; "" if accepted."""
    if stage == fields.ADMISSION:
        rejection = admission.admit(pod, NODE, [])
        return "" if rejection is None else f"{rejection.reason}: {rejection.message}"
    if stage == fields.SANDBOX:
        try:
            sandbox_config.build_sandbox_config(pod, 0, dns=sandbox_config.DnsSettings(), layout=LAYOUT)
        except sandbox_config.SandboxConfigError as exc:
            return str(exc)
        return ""
    if stage == fields.VOLUME:
        config_maps, secrets = plugins.referenced_objects(pod)
        try:
            plugins.plan_volumes(pod, layout=LAYOUT, config_maps=_fetched(config_maps), secrets=_fetched(secrets),
                                 tokens={})
        except plugins.VolumeError as exc:
            return str(exc)
        return ""
    if stage == fields.CONTAINER:
        return "\n".join(container_errors(pod))
    if stage == fields.HOOK:
        container = pod.spec.container("x")
        assert container is not None and container.lifecycle
        results = [asyncio.run(HookRunner(None).run(handler, pod, container, "id", "10.0.0.1", 1))  # type: ignore
                   for handler in container.lifecycle.values()]
        return "\n".join(r for r in results if r)
    raise AssertionError(stage)


@pytest.mark.parametrize("path", REFUSALS)
def test_each_refusal_is_what_kopflet_does(path: str) -> None:
    refusal = FIELDS[path].refusal
    assert refusal is not None
    if refusal.stage == fields.SPEC:
        body = copy.deepcopy(BASE)
        body["spec"].update(copy.deepcopy(refusal.example))
        with pytest.raises(spec.SpecError, match=re.escape(refusal.says)):
            spec.pod_from_body(body)
        return
    said = _refusal_text(refusal.stage, make_pod(refusal.example))
    assert refusal.says in said, f"{path}: {refusal.stage} says {said!r}"
    if refusal.says == unsupported.POD_FEATURE_UNSUPPORTED:  # and for this field, not another one
        assert re.search(r"\." + re.escape(path.rsplit(".", 1)[-1].removesuffix("[]")) + r"(\[0\])?:", said), said


def test_the_examples_set_the_field_they_stand_for() -> None:
    """Each example mentions the field's own name, so a refusal is not passing for another field's sake."""
    for path in REFUSALS:
        refusal = FIELDS[path].refusal
        assert refusal is not None
        last = path.rstrip("[]").rsplit(".", 1)[-1].removesuffix("[]")
        assert f"'{last}'" in repr(refusal.example), path
