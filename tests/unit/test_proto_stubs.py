"""The checked-in gRPC stubs are what their checked-in .proto generates: a .proto changed without running its
generate.sh (or stubs edited by hand) fails here. Each generate.sh runs `grpc_tools.protoc` from the repo root
with ``-I.``; the same command into a temporary directory must give the same files byte for byte.

The .proto files themselves come from Go modules (``make proto``); their headers name the module and version
they were vendored from, checked against devstack/versions.env where the pin lives there."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROTOS = (
    "cri_client/proto/api.proto",
    "kopflet/apis/podresources/proto/v1/api.proto",
    "kopflet/apis/podresources/proto/v1alpha1/api.proto",
    "kopflet/cm/devicemanager/proto/api.proto",
    "kopflet/pluginmanager/proto/api.proto",
    "kopflet/volumes/csi/proto/csi.proto",
)
VERSIONS = dict(line.split("=", 1) for line in (REPO / "devstack" / "versions.env").read_text().splitlines()
                if re.match(r"^[A-Z_]+=", line))


@pytest.mark.parametrize("proto", PROTOS)
def test_the_stubs_are_generated_from_the_proto(proto: str, tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools")
    copy = tmp_path / proto
    copy.parent.mkdir(parents=True)
    shutil.copy(REPO / proto, copy)
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I.", "--python_out=.", "--grpc_python_out=.",
                    "--pyi_out=.", proto], cwd=tmp_path, check=True, capture_output=True, timeout=120)
    stem = proto.removesuffix(".proto")
    for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py"):
        generated = (tmp_path / f"{stem}{suffix}").read_text()
        assert (REPO / f"{stem}{suffix}").read_text() == generated, \
            f"{stem}{suffix} is stale: run the generate.sh next to {proto}"


@pytest.mark.parametrize(("proto", "module"), [
    ("kopflet/pluginmanager/proto/api.proto", f"k8s.io/kubelet@{VERSIONS['KUBERNETES_STAGING_VERSION']}"),
    ("kopflet/cm/devicemanager/proto/api.proto", f"k8s.io/kubelet@{VERSIONS['KUBERNETES_STAGING_VERSION']}"),
    ("kopflet/volumes/csi/proto/csi.proto", "github.com/container-storage-interface/spec@v"),
])
def test_the_proto_names_its_pinned_module(proto: str, module: str) -> None:
    header = (REPO / proto).read_text().split("\n\n", 1)[0]
    assert f"Go module {module}" in header, header


def test_the_csi_spec_is_the_one_the_pinned_kubelet_requires() -> None:
    """k8s.io/kubernetes' go.mod names the CSI spec it is built with; generate.sh reads it there."""
    header = (REPO / "kopflet/volumes/csi/proto/csi.proto").read_text().split("\n\n", 1)[0]
    assert f"k8s.io/kubernetes@{VERSIONS['KUBERNETES_VERSION']} requires" in header, header
    gomod = Path.home() / "go/pkg/mod/cache/download/k8s.io/kubernetes/@v" / f"{VERSIONS['KUBERNETES_VERSION']}.mod"
    if not gomod.exists():
        pytest.skip(f"{gomod} not in the Go module cache")
    required = re.search(r"^\s*github\.com/container-storage-interface/spec\s+(\S+)", gomod.read_text(), re.M)
    assert required is not None
    assert f"spec@{required.group(1)}," in header, (required.group(1), header)
