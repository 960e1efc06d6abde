"""Shared fixtures: the local stack as `python -m devstack run` (used by `make test`) exposes it.

Tests that need the stack skip when it is not there (a bare `pytest tests/unit` run);
`make test` always runs them against the real stack.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from devstack.layout import Layout

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def layout() -> Layout:
    if not os.environ.get("KOPFLET_DEVSTACK_DIR"):
        pytest.skip("needs the local stack: run through `make test` (python -m devstack run -- pytest ...)")
    return Layout.from_env()


class Kubectl:
    """kubectl with one identity; `run` returns the completed process, `json` parses -o json."""

    def __init__(self, binary: Path, kubeconfig: Path) -> None:
        self.binary, self.kubeconfig = binary, kubeconfig

    def run(self, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([str(self.binary), f"--kubeconfig={self.kubeconfig}", *args],
                              input=stdin, capture_output=True, text=True, timeout=60)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
        return proc

    def json(self, *args: str) -> dict:
        return json.loads(self.run(*args, "-o", "json").stdout)

    def apply(self, manifest: str) -> None:
        self.run("apply", "-f", "-", stdin=manifest)

    def raw(self, path: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run("get", "--raw", path, check=check)


@pytest.fixture(scope="session")
def admin(layout: Layout) -> Kubectl:
    return Kubectl(layout.bin_dir / "kubectl", layout.admin_kubeconfig)


@pytest.fixture(scope="session")
def node_kubectl(layout: Layout) -> Kubectl:
    return Kubectl(layout.bin_dir / "kubectl", layout.node_kubeconfig)


def forbidden(proc: subprocess.CompletedProcess[str], texts: Sequence[str] = ("Forbidden", "forbidden")) -> bool:
    return proc.returncode != 0 and any(t in proc.stderr for t in texts)
