#!/usr/bin/env bash
# Regenerate cri_client/proto/api.proto and its Python stubs from the pinned k8s.io/cri-api Go module.
#
# The pin is KUBERNETES_STAGING_VERSION in devstack/versions.env, so the CRI API moves with the rest
# of the stack. The generated files are committed: the runtime needs grpcio and protobuf, never
# grpcio-tools or Go. Runnable from any directory.
#
# Needs: go (for `go mod download`; only the module proxy is used, no checksum database) and a Python
# with grpcio-tools (the repo's .venv by default; override with PYTHON=...).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "${here}/../.." && pwd)"
versions="${repo}/devstack/versions.env"

version="$(sed -n 's/^KUBERNETES_STAGING_VERSION=//p' "${versions}" | tr -d '"'"'"' \r')"
if [[ -z "${version}" ]]; then
    echo "generate.sh: KUBERNETES_STAGING_VERSION not found in ${versions}" >&2
    exit 1
fi
module="k8s.io/cri-api@${version}"

python="${PYTHON:-}"
if [[ -z "${python}" ]]; then
    if [[ -x "${repo}/.venv/bin/python" ]]; then python="${repo}/.venv/bin/python"; else python="python3"; fi
fi

# `go mod download` wants a module context; a throwaway one keeps the repo free of go.mod/go.sum.
workdir="$(mktemp -d)"
trap 'rm -rf "${workdir}"' EXIT
printf 'module kopflet.invalid/crigen\n\ngo 1.21\n' > "${workdir}/go.mod"
json="$(cd "${workdir}" && GOSUMDB=off GOFLAGS=-mod=mod GOTOOLCHAIN=local go mod download -json "${module}")"
moddir="$(printf '%s' "${json}" | "${python}" -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')"
src="${moddir}/pkg/apis/runtime/v1/api.proto"
if [[ ! -f "${src}" ]]; then
    echo "generate.sh: ${src} not found (download output: ${json})" >&2
    exit 1
fi

# Older cri-api releases import gogo.proto and decorate messages/fields with (gogoproto.*) options;
# protoc has no gogo.proto, and Python does not need them. Strip them, keep everything else verbatim.
"${python}" - "${src}" "${here}/api.proto" "${module}" <<'PY'
import re
import sys

src, dst, module = sys.argv[1:4]
text = open(src, encoding="utf-8").read()
text = re.sub(r'^\s*import\s+"github\.com/gogo/protobuf/gogoproto/gogo\.proto";[ \t]*\n', "", text, flags=re.M)
text = re.sub(r'^\s*option\s+\(gogoproto\.[A-Za-z_]+\)\s*=\s*[^;]+;[ \t]*\n', "", text, flags=re.M)
# Field options: drop each (gogoproto.x) = value entry, then any option brackets left empty.
text = re.sub(r'\(gogoproto\.[A-Za-z_]+\)\s*=\s*("[^"]*"|[^,\]\s]+)\s*,?\s*', "", text)
text = re.sub(r',\s*\]', "]", text)
text = re.sub(r'\s*\[\s*\]', "", text)
if "gogoproto" in text:
    sys.exit(f"generate.sh: gogoproto references left in {src}")
header = (
    f"// Vendored from the Go module {module}, file pkg/apis/runtime/v1/api.proto,\n"
    "// with gogoproto imports and options stripped. Do not edit: regenerate with\n"
    "// cri_client/proto/generate.sh after changing KUBERNETES_STAGING_VERSION in devstack/versions.env.\n\n"
)
with open(dst, "w", encoding="utf-8") as f:
    f.write(header + text)
PY

# -I. from the repo root makes the generated modules import each other as cri_client.proto.api_pb2.
cd "${repo}"
rm -f cri_client/proto/api_pb2.py cri_client/proto/api_pb2.pyi cri_client/proto/api_pb2_grpc.py
"${python}" -m grpc_tools.protoc -I. --python_out=. --grpc_python_out=. --pyi_out=. cri_client/proto/api.proto
# containerd's event service (a hand-kept subset of its API, see the file's header): its stubs alone.
rm -f cri_client/proto/events_pb2.py cri_client/proto/events_pb2.pyi cri_client/proto/events_pb2_grpc.py
"${python}" -m grpc_tools.protoc -I. --python_out=. --grpc_python_out=. --pyi_out=. cri_client/proto/events.proto
echo "generate.sh: cri_client/proto/api.proto and stubs regenerated from ${module}, events.proto's stubs too"
