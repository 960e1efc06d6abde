"""operator/ is a script folder for `kopf run operator/main.py`; it must never shadow stdlib `operator`."""

from __future__ import annotations

import importlib.machinery
import subprocess
import sys
import sysconfig
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_operator_folder_is_not_a_package() -> None:
    assert (REPO / "operator" / "main.py").is_file()
    assert not (REPO / "operator" / "__init__.py").exists()


def test_import_operator_finds_the_stdlib_even_with_the_repo_first_on_the_path() -> None:
    spec = importlib.machinery.PathFinder.find_spec("operator", [str(REPO), *sys.path])
    assert spec is not None and spec.origin is not None
    assert Path(spec.origin).parent == Path(sysconfig.get_paths()["stdlib"])


def test_fresh_interpreter_in_the_repo_gets_stdlib_operator() -> None:
    code = "import operator, sys; print(operator.__file__); print(operator.itemgetter(1)([0, 42]))"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout
    origin, value = out.split()
    assert Path(origin).parent == Path(sysconfig.get_paths()["stdlib"])
    assert value == "42"
