"""The kubeadm cluster `make cluster` brings up (devstack/cluster.py): kopflet is its node's kubelet."""

from __future__ import annotations

import pytest

from devstack import cluster
from devstack.layout import Layout
from tests.conftest import Kubectl


@pytest.fixture(scope="session")
def layout() -> Layout:
    """The stack's layout (its binaries, node name, ranges); the cluster runs in place of the stack's control plane,
    so these tests run outside `python -m devstack run` and never skip."""
    return Layout.from_env()


@pytest.fixture(scope="session")
def kubectl(layout: Layout) -> Kubectl:
    if not cluster.ADMIN_CONF.exists():
        pytest.fail(f"no kubeadm cluster here ({cluster.ADMIN_CONF} is missing): run `make cluster` first")
    return Kubectl(layout.bin_dir / "kubectl", cluster.ADMIN_CONF)
