#!/usr/bin/env bash
# Build etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubectl from pinned Go
# modules (through the Go module proxy; no git checkout of kubernetes is needed).
# Binaries are cached per version under $KOPFLET_CACHE/bin/<k8s version>, so a second run is free.
# --kubelet also builds the upstream kubelet of the same release: `make bench` measures kopflet beside it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
cache=${KOPFLET_CACHE:-/var/cache/kopflet}
out="$cache/bin/$KUBERNETES_VERSION-etcd-$ETCD_VERSION"
k8s_bins=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
# agnhost: upstream's e2e test image binary (grpc health server, netexec, inclusterclient...), from the
# same k8s.io/kubernetes module; images/build.py packs it into registry.k8s.io/e2e-test-images/agnhost.
test_bins=(agnhost)
[ "${1:-}" = "--kubelet" ] && k8s_bins+=(kubelet)

missing=0
for b in etcd "${k8s_bins[@]}" "${test_bins[@]}"; do [ -x "$out/$b" ] || missing=1; done
if [ "$missing" = 0 ]; then echo "$out"; exit 0; fi

mkdir -p "$out" "$cache/build"
# sum.golang.org is not reachable here; the module proxy is the source of truth.
export GOSUMDB=off GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0
export GOCACHE=${GOCACHE:-$cache/go-build}

# --- etcd ------------------------------------------------------------------------------------
if [ ! -x "$out/etcd" ]; then
  d="$cache/build/etcd-$ETCD_VERSION"; mkdir -p "$d"
  cat > "$d/main.go" <<'GO'
// Command etcd: the upstream etcd server entry point, built from the pinned server module.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  cat > "$d/go.mod" <<GO
module kopflet.local/etcd
go 1.24
require go.etcd.io/etcd/server/v3 $ETCD_VERSION
GO
  (cd "$d" && go mod tidy >&2 && go build -trimpath -o "$out/etcd" . >&2)
fi

# --- kubernetes ------------------------------------------------------------------------------
d="$cache/build/kubernetes-$KUBERNETES_VERSION"; mkdir -p "$d"
staging=$(curl -sfL --max-time 60 "$(go env GOPROXY | cut -d, -f1)/k8s.io/kubernetes/@v/$KUBERNETES_VERSION.mod" \
  | sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\1#p')
[ -n "$staging" ] || { echo "could not read the staging module list of k8s.io/kubernetes $KUBERNETES_VERSION" >&2; exit 1; }
{
  echo "module kopflet.local/kubernetes"
  echo "go 1.26"
  echo "require k8s.io/kubernetes $KUBERNETES_VERSION"
  echo "replace ("
  for m in $staging; do echo "	$m => $m $KUBERNETES_STAGING_VERSION"; done
  echo ")"
} > "$d/go.mod"
cat > "$d/tools.go" <<'GO'
//go:build tools

// Package tools pins the commands this module builds.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "k8s.io/kubernetes/test/images/agnhost"
)
GO
minor=${KUBERNETES_VERSION#v1.}; minor=${minor%%.*}
ldflags="-s -w \
 -X k8s.io/component-base/version.gitVersion=$KUBERNETES_VERSION \
 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor \
 -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/client-go/pkg/version.gitVersion=$KUBERNETES_VERSION \
 -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"
cd "$d"
go mod tidy >&2
for b in "${k8s_bins[@]}"; do
  [ -x "$out/$b" ] && continue
  echo "building $b $KUBERNETES_VERSION ..." >&2
  go build -trimpath -tags tools -ldflags "$ldflags" -o "$out/$b.tmp" "k8s.io/kubernetes/cmd/$b" >&2
  mv "$out/$b.tmp" "$out/$b"
done
if [ ! -x "$out/agnhost" ]; then
  echo "building agnhost $KUBERNETES_VERSION ..." >&2
  go build -trimpath -tags tools -ldflags "-s -w" -o "$out/agnhost.tmp" k8s.io/kubernetes/test/images/agnhost >&2
  # The image tag upstream publishes for this agnhost source.
  cat "$(go list -m -f "{{.Dir}}" k8s.io/kubernetes)/test/images/agnhost/VERSION" > "$out/agnhost.version"
  mv "$out/agnhost.tmp" "$out/agnhost"
fi
echo "$out"
