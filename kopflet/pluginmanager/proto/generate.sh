#!/usr/bin/env bash
# Regenerate kopflet/pluginmanager/proto/api.proto (the kubelet plugin registration API, v1) and its Python stubs
# from the pinned k8s.io/kubelet Go module (pkg/apis/pluginregistration/v1/api.proto), as cri_client/proto/generate.sh
# does for the CRI.
#
# The pin is KUBERNETES_STAGING_VERSION in devstack/versions.env. The generated files are committed: the agent
# needs grpcio and protobuf, never grpcio-tools or Go. The proto's `package pluginregistration` is kept, so the
# service is /pluginregistration.Registration on the wire, as the plugins (node-driver-registrar) serve it.
# Runnable from any directory.
#
# Needs: go (for `go mod download`; only the module proxy is used, no checksum database) and a Python with
# grpcio-tools (the repo's .venv by default; override with PYTHON=...).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "${here}/../../.." && pwd)"
versions="${repo}/devstack/versions.env"
rel="kopflet/pluginmanager/proto"

version="$(sed -n 's/^KUBERNETES_STAGING_VERSION=//p' "${versions}" | tr -d '"'"'"' \r')"
if [[ -z "${version}" ]]; then
    echo "generate.sh: KUBERNETES_STAGING_VERSION not found in ${versions}" >&2
    exit 1
fi
module="k8s.io/kubelet@${version}"

python="${PYTHON:-}"
if [[ -z "${python}" ]]; then
    if [[ -x "${repo}/.venv/bin/python" ]]; then python="${repo}/.venv/bin/python"; else python="python3"; fi
fi

# `go mod download` wants a module context; a throwaway one keeps the repo free of go.mod/go.sum.
workdir="$(mktemp -d)"
trap 'rm -rf "${workdir}"' EXIT
printf 'module kopflet.invalid/pluginregistrationgen\n\ngo 1.21\n' > "${workdir}/go.mod"
json="$(cd "${workdir}" && GOSUMDB=off GOFLAGS=-mod=mod GOTOOLCHAIN=local go mod download -json "${module}")"
moddir="$(printf '%s' "${json}" | "${python}" -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')"
src="${moddir}/pkg/apis/pluginregistration/v1/api.proto"
if [[ ! -f "${src}" ]]; then
    echo "generate.sh: ${src} not found (download output: ${json})" >&2
    exit 1
fi
if grep -q gogoproto "${src}"; then
    echo "generate.sh: ${src} imports gogoproto; strip it as cri_client/proto/generate.sh does" >&2
    exit 1
fi
{
    printf '// Vendored verbatim from the Go module %s, file pkg/apis/pluginregistration/v1/api.proto.\n' "${module}"
    printf '// Do not edit: regenerate with %s/generate.sh after changing KUBERNETES_STAGING_VERSION.\n\n' "${rel}"
    cat "${src}"
} > "${here}/api.proto"

# -I. from the repo root makes the generated modules import each other by their package path.
cd "${repo}"
rm -f "${rel}/api_pb2.py" "${rel}/api_pb2.pyi" "${rel}/api_pb2_grpc.py"
"${python}" -m grpc_tools.protoc -I. --python_out=. --grpc_python_out=. --pyi_out=. "${rel}/api.proto"
echo "generate.sh: ${rel}/api.proto and stubs regenerated from ${module}"
