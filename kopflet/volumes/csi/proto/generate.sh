#!/usr/bin/env bash
# Regenerate kopflet/volumes/csi/proto/csi.proto (the Container Storage Interface spec) and its Python stubs from the
# Go module github.com/container-storage-interface/spec at the version the pinned kubelet builds with, as
# cri_client/proto/generate.sh does for the CRI.
#
# The pin is KUBERNETES_VERSION in devstack/versions.env: the CSI spec's version is the one k8s.io/kubernetes' go.mod
# at that version requires (a pseudo-version at v1.37.1), read from that go.mod here, so the spec moves with the
# kubelet. The generated files are committed: the agent needs grpcio and protobuf, never grpcio-tools or Go. The
# proto's `package csi.v1` is kept, so the services are /csi.v1.Identity and /csi.v1.Node on the wire, as the
# drivers serve them. Runnable from any directory.
#
# Needs: go (for `go mod download`; only the module proxy is used, no checksum database) and a Python with
# grpcio-tools (the repo's .venv by default; override with PYTHON=...).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "${here}/../../../.." && pwd)"
versions="${repo}/devstack/versions.env"
rel="kopflet/volumes/csi/proto"

kubernetes="$(sed -n 's/^KUBERNETES_VERSION=//p' "${versions}" | tr -d '"'"'"' \r')"
if [[ -z "${kubernetes}" ]]; then
    echo "generate.sh: KUBERNETES_VERSION not found in ${versions}" >&2
    exit 1
fi

python="${PYTHON:-}"
if [[ -z "${python}" ]]; then
    if [[ -x "${repo}/.venv/bin/python" ]]; then python="${repo}/.venv/bin/python"; else python="python3"; fi
fi

# `go mod download` wants a module context; a throwaway one keeps the repo free of go.mod/go.sum.
workdir="$(mktemp -d)"
trap 'rm -rf "${workdir}"' EXIT
printf 'module kopflet.invalid/csigen\n\ngo 1.21\n' > "${workdir}/go.mod"
download() {
    (cd "${workdir}" && GOSUMDB=off GOFLAGS=-mod=mod GOTOOLCHAIN=local go mod download -json "$1")
}
field() {
    "${python}" -c 'import json, sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"
}

# The kubelet's go.mod names the CSI spec it is built with.
gomod="$(download "k8s.io/kubernetes@${kubernetes}" | field GoMod)"
version="$(sed -n 's|^[[:space:]]*github.com/container-storage-interface/spec[[:space:]]\+\(v[^[:space:]]*\).*$|\1|p' \
    "${gomod}" | head -n 1)"
if [[ -z "${version}" ]]; then
    echo "generate.sh: github.com/container-storage-interface/spec not required by ${gomod}" >&2
    exit 1
fi
module="github.com/container-storage-interface/spec@${version}"
moddir="$(download "${module}" | field Dir)"
src="${moddir}/csi.proto"
if [[ ! -f "${src}" ]]; then
    echo "generate.sh: ${src} not found" >&2
    exit 1
fi

{
    printf '// Vendored verbatim from the Go module %s, file csi.proto: the CSI spec\n' "${module}"
    printf '// k8s.io/kubernetes@%s requires. Do not edit: regenerate with %s/generate.sh\n' "${kubernetes}" "${rel}"
    printf '// after changing KUBERNETES_VERSION in devstack/versions.env.\n\n'
    cat "${src}"
} > "${here}/csi.proto"

# -I. from the repo root makes the generated modules import each other by their package path; grpc_tools adds the
# well-known types (descriptor, timestamp, wrappers) csi.proto imports.
cd "${repo}"
rm -f "${rel}/csi_pb2.py" "${rel}/csi_pb2.pyi" "${rel}/csi_pb2_grpc.py"
"${python}" -m grpc_tools.protoc -I. --python_out=. --grpc_python_out=. --pyi_out=. "${rel}/csi.proto"
echo "generate.sh: ${rel}/csi.proto and stubs regenerated from ${module}"
