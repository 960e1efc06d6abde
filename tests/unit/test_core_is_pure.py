"""The kopflet package is the pure core: importing any of its modules must not pull in I/O frameworks.

Each module is imported in a fresh interpreter (the test process itself has imported everything already),
then sys.modules is checked for the frameworks that only the glue (handlers/, cri_client's client) may use.
"""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import kopflet

REPO = Path(__file__).resolve().parents[2]
FORBIDDEN = ("grpc", "kopf", "aiohttp", "kubernetes")
# Modules of kopflet/ that are allowed to do I/O (a future worker/executor may live here): none so far.
IMPURE: frozenset[str] = frozenset()

MODULES = sorted(f"kopflet.{m.name}" for m in pkgutil.iter_modules(kopflet.__path__) if m.name not in IMPURE)


def _loaded_after_import(*modules: str) -> list[str]:
    script = (
        "import importlib, json, sys\n"
        f"for name in {list(modules)!r}:\n"
        "    importlib.import_module(name)\n"
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({list(FORBIDDEN)!r}))))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_the_core_modules_are_found() -> None:
    for expected in ("kopflet.spec", "kopflet.labels", "kopflet.podstate", "kopflet.backoff", "kopflet.reconciler"):
        assert expected in MODULES


@pytest.mark.parametrize("module", MODULES)
def test_module_imports_no_io_framework(module: str) -> None:
    assert _loaded_after_import(module) == [], f"importing {module} pulls in I/O frameworks"


def test_whole_core_imports_no_io_framework() -> None:
    assert _loaded_after_import("kopflet", *MODULES) == []
