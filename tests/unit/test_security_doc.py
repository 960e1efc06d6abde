"""docs/security.md against the code: the CIS table's flags and fields are settings kopflet has (or refuses, where the
doc says so), its defaults are kopflet's, its totals add up, the tests it names exist in tests/e2e/test_cis_kubelet.py,
and its list of the agent's API writes is the e2e test's and the RBAC manifest's."""

from __future__ import annotations

import ast
import dataclasses
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from kopflet.config import settings, tls_options

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "security.md"
E2E = REPO / "tests" / "e2e" / "test_cis_kubelet.py"
RBAC = REPO / "manifests" / "20-rbac.yaml"

STATUSES = ("pass", "configurable", "cannot", "n/a")
CHECKS = ([f"4.1.{i}" for i in range(1, 11)] + [f"4.2.{i}" for i in range(1, 15)] + ["4.2.6 (v1.8)"])
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}
_NAME = re.compile(r"`([^`]+)`( \(refused\))?")
_BY_FLAG = {s.flag: s for s in settings.SETTINGS if s.flag}
_BY_FIELD = {s.field: s for s in settings.SETTINGS if s.field}


@dataclasses.dataclass(frozen=True)
class Row:
    cis: str
    flags: tuple[tuple[str, bool], ...]
    """(flag without the dashes, refused)."""
    fields: tuple[tuple[str, bool], ...]
    default: str
    status: str
    tests: tuple[str, ...]
    test_cell: str


def _table(text: str, header: str) -> list[list[str]]:
    """The cells of the markdown table whose header row starts with ``header``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def _names(cell: str) -> tuple[tuple[str, bool], ...]:
    return tuple((name, bool(refused)) for name, refused in _NAME.findall(cell))


def rows() -> list[Row]:
    out = []
    for cis, _check, flags, fields, default, status, tests in _table(DOC.read_text(), "| CIS | Check |"):
        out.append(Row(cis=cis, flags=tuple((n.removeprefix("--"), r) for n, r in _names(flags)),
                       fields=_names(fields), default=default, status=status,
                       tests=tuple(n for n, _ in _names(tests)), test_cell=tests))
    return out


def _e2e() -> ast.Module:
    return ast.parse(E2E.read_text())


def _e2e_tests() -> set[str]:
    return {node.name for node in _e2e().body if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}


def _e2e_constant(name: str) -> Any:
    for node in _e2e().body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            assert node.value is not None
            return node.value
    raise AssertionError(f"{E2E.name} has no {name}")


def test_the_table_has_every_check_once() -> None:
    found = [row.cis for row in rows()]
    assert len(found) == len(set(found)) and set(found) == set(CHECKS), sorted(set(found) ^ set(CHECKS))


def test_statuses_and_the_totals_line() -> None:
    counts = Counter(row.status for row in rows())
    assert set(counts) <= set(STATUSES), counts
    line = next(line for line in DOC.read_text().splitlines() if line.startswith("Totals: "))
    stated = {status: int(n) for n, status in re.findall(r"(\d+) (pass|configurable|cannot|n/a)", line)}
    assert stated == {s: counts[s] for s in STATUSES}, (line, counts)


@pytest.mark.parametrize("row", rows(), ids=lambda r: r.cis)
def test_named_flags_and_fields_are_settings_or_refused(row: Row) -> None:
    for flag, refused in row.flags:
        if refused:
            assert flag not in _BY_FLAG, f"--{flag} is a kopflet flag: not refused"
            with pytest.raises(settings.ConfigError, match=f"unknown flag: --{re.escape(flag)}"):
                settings.parse_flags([f"--{flag}=1"])
        else:
            assert flag in _BY_FLAG, f"--{flag} is not a kopflet flag"
    for field, refused in row.fields:
        if refused:
            assert field in settings.UNSUPPORTED_FIELDS and field not in _BY_FIELD, field
            text = f"apiVersion: {settings.CONFIG_API_VERSION}\nkind: {settings.CONFIG_KIND}\n{field}: 1\n"
            with pytest.raises(settings.ConfigError, match=f'field "{field}" is not supported by kopflet'):
                settings.parse_config_file("config.yaml", text)
        else:
            assert field in _BY_FIELD, f"{field} is not a kopflet config field"


@pytest.mark.parametrize("row", [r for r in rows() if r.status == "cannot"], ids=lambda r: r.cis)
def test_what_kopflet_cannot_do_it_refuses(row: Row) -> None:
    """"cannot" means the setting is refused: nothing kopflet takes could meet the check."""
    named = row.flags + row.fields
    assert named and all(refused for _, refused in named), row


def _expected_value(setting: settings.Setting, hostname: str) -> Any:
    if setting.default in ('""', "none"):
        return None  # empty: any falsy value
    if setting.default == "the hostname":
        return hostname
    return setting.kind.from_text(setting.default)


EFFECTIVE = {"tls_min_version": lambda c: c.tls_min_version or tls_options.DEFAULT_MIN_VERSION}


@pytest.mark.parametrize("row", [r for r in rows() if r.flags or r.fields], ids=lambda r: r.cis)
def test_stated_defaults_are_kopflets(row: Row) -> None:
    """The default cell shows each named setting's documented default (configuration.md's), and that is what
    kopflet takes with no flags, file or environment."""
    shown = {name for name, _ in _names(row.default)}
    config = settings.load([], {}, "node-a", read_file=lambda path: "")
    named = [_BY_FLAG[f] for f, refused in row.flags if not refused] + \
        [_BY_FIELD[f] for f, refused in row.fields if not refused]
    for setting in named:
        assert setting.default in shown, (row.cis, setting.default, row.default)
        if setting.attr.startswith("_"):
            continue  # --config: not an AgentConfig attribute
        actual = EFFECTIVE.get(setting.attr, lambda c, a=setting.attr: getattr(c, a))(config)
        expected = _expected_value(setting, "node-a")
        if expected is None:
            assert not actual, (setting.attr, actual)
        else:
            assert actual == expected, (setting.attr, actual, expected)


def test_named_tests_exist_and_every_e2e_test_is_named() -> None:
    tests = _e2e_tests()
    text = DOC.read_text()
    for row in rows():
        assert row.tests or row.test_cell == ("—" if row.status == "n/a" else "manual"), row
        for name in row.tests:
            assert name in tests, f"{row.cis}: {name} is not in {E2E.name}"
    mentioned = set(re.findall(r"\b(test_\w+)", text))
    assert mentioned - {"test_security_doc", "test_cis_kubelet", "test_tls_bootstrap"} <= tests, mentioned - tests
    assert tests <= mentioned, f"tests the doc does not mention: {sorted(tests - mentioned)}"


def test_parametrized_cases_the_doc_names_exist() -> None:
    files = _e2e_constant("FILES")
    assert isinstance(files, ast.Dict)
    ids = {ast.literal_eval(key) for key in files.keys if key is not None}
    named = set(re.findall(r"test_files_are_private_and_roots\[([^\]]+)\]", DOC.read_text()))
    assert named and named <= ids, named - ids


def _doc_writes() -> set[tuple[str, str, str]]:
    writes = set()
    for resource_cell, verbs_cell, _why in _table(DOC.read_text(), "| resource | verbs |"):
        resource, _, sub = _names(resource_cell)[0][0].partition("/")
        writes |= {(resource, sub, verb.strip()) for verb in verbs_cell.split(",")}
    return writes


def _rbac_writes() -> set[tuple[str, str, str]]:
    writes = set()
    for doc in yaml.safe_load_all(RBAC.read_text()):
        if doc and doc.get("kind") in ("ClusterRole", "Role"):
            for rule in doc["rules"]:
                for name in rule["resources"]:
                    resource, _, sub = name.partition("/")
                    writes |= {(resource, sub, verb) for verb in rule["verbs"] if verb in WRITE_VERBS}
    return writes


def test_the_agents_writes_are_the_e2e_lists_and_the_rbac_manifests() -> None:
    doc = _doc_writes()
    assert doc == ast.literal_eval(_e2e_constant("WRITES").args[0])  # frozenset({...})
    assert doc == _rbac_writes()


def test_the_default_tls_suites_are_what_the_doc_says() -> None:
    """4.2.12: TLS 1.2 clients get ECDHE with AES-GCM or ChaCha20-Poly1305 only; TLS 1.0 and 1.1 are refused."""
    plan = tls_options.plan()
    assert plan.minimum_version == "TLSv1_2"
    aead = re.compile(r"ECDHE-(RSA|ECDSA)-(AES(128|256)-GCM-SHA(256|384)|CHACHA20-POLY1305)")
    assert plan.openssl_names and all(aead.fullmatch(name) for name in plan.openssl_names), plan


def test_paths_the_doc_names_exist() -> None:
    text = DOC.read_text()
    for path in set(re.findall(r"`((?:kopflet|devstack|manifests|handlers|tests)/[\w/.-]+\.(?:py|yaml))`", text)):
        assert (REPO / path).exists(), path
    for target in re.findall(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", text):
        assert (DOC.parent / target).exists(), target


def test_the_readme_links_the_doc() -> None:
    assert "(docs/security.md)" in (REPO / "README.md").read_text()
