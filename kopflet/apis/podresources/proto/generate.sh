#!/usr/bin/env bash
# Regenerate the pod-resources API's .proto files (v1 and v1alpha1) and their Python stubs from the pinned
# k8s.io/kubelet Go module (pkg/apis/podresources/<version>/api.proto), as cri_client/proto/generate.sh does for CRI.
#
# The pin is KUBERNETES_STAGING_VERSION in devstack/versions.env. The generated files are committed: the runtime
# needs grpcio and protobuf, never grpcio-tools or Go. Runnable from any directory.
#
# Needs: go (for `go mod download`; only the module proxy is used, no checksum database) and a Python with
# grpcio-tools (the repo's .venv by default; override with PYTHON=...).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "${here}/../../../.." && pwd)"
versions="${repo}/devstack/versions.env"
rel="kopflet/apis/podresources/proto"

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
printf 'module kopflet.invalid/podresourcesgen\n\ngo 1.21\n' > "${workdir}/go.mod"
json="$(cd "${workdir}" && GOSUMDB=off GOFLAGS=-mod=mod GOTOOLCHAIN=local go mod download -json "${module}")"
moddir="$(printf '%s' "${json}" | "${python}" -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')"

cd "${repo}"
for api in v1 v1alpha1; do
    src="${moddir}/pkg/apis/podresources/${api}/api.proto"
    if [[ ! -f "${src}" ]]; then
        echo "generate.sh: ${src} not found (download output: ${json})" >&2
        exit 1
    fi
    mkdir -p "${rel}/${api}"
    touch "${rel}/${api}/__init__.py"
    {
        printf '// Vendored verbatim from the Go module %s, file pkg/apis/podresources/%s/api.proto.\n' "${module}" "${api}"
        printf '// Do not edit: regenerate with %s/generate.sh after changing KUBERNETES_STAGING_VERSION.\n\n' "${rel}"
        cat "${src}"
    } > "${rel}/${api}/api.proto"
    rm -f "${rel}/${api}/api_pb2.py" "${rel}/${api}/api_pb2.pyi" "${rel}/${api}/api_pb2_grpc.py"
    # -I. from the repo root makes the generated modules import each other by their package path.
    "${python}" -m grpc_tools.protoc -I. --python_out=. --grpc_python_out=. --pyi_out=. "${rel}/${api}/api.proto"
done
echo "generate.sh: ${rel}/{v1,v1alpha1}/api.proto and stubs regenerated from ${module}"
