"""manifests/ (the DaemonSet install of docs/operations.md) on the kubeadm cluster: kopflet, the cluster's kubelet,
runs the DaemonSet's pod, in which a second kopflet registers ``kopflet-<node>`` and runs the pods placed there.

The same checks as tests/e2e/test_daemonset.py on the stack, with the same rewrites of the manifests for this
machine (that module's docstring says which and why); here the resident kubelet is the kubeadm node's, as on the
minikube node docs/operations.md's guide installs on (minikube itself cannot start without internet access)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from devstack.layout import Layout
from tests.conftest import Kubectl
from tests.e2e.test_daemonset import (  # noqa: F401  (collected here, on the cluster)
    installed,
    test_a_tolerating_pod_runs_in_the_inner_runtime_and_is_deleted_by_it,
    test_the_daemonset_registers_a_node_of_its_own,
)


@pytest.fixture(scope="module")
def admin(kubectl: Kubectl) -> Kubectl:
    return kubectl


@pytest.fixture
def namespace(admin: Kubectl) -> Iterator[str]:
    name = f"ds-{uuid.uuid4().hex[:6]}"
    admin.run("create", "namespace", name)
    yield name
    with contextlib.suppress(AssertionError):
        admin.run("delete", "namespace", name, "--wait=false")


@pytest.fixture(scope="module")
def daemonset(admin: Kubectl, layout: Layout) -> Iterator[dict[str, Any]]:
    with installed(admin, layout) as found:
        yield found
