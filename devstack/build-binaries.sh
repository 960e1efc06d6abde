#!/usr/bin/env bash
# Build etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubectl from pinned Go
# modules (through the Go module proxy; no git checkout of kubernetes is needed).
# Binaries are cached per version under $KOPFLET_CACHE/bin/<k8s version>, so a second run is free.
# --kubelet also builds the upstream kubelet of the same release: `make bench` measures kopflet beside it.
# --kubemark also builds upstream's hollow node (cmd/kubemark), for measuring `kopflet hollow` beside it.
# --e2e also builds upstream's e2e test binary (e2e.test, from k8s.io/kubernetes/test/e2e with its own
# e2e_test.go) and the ginkgo CLI at the version that module graph selects: `make conformance` runs them.
# --cluster also builds what the images of a `kubeadm init` cluster hold (images/build.py packs them):
#   $out/kubeadm, $out/kube-proxy and $out/kube-log-runner (which upstream's server images carry as /go-runner,
#   build/server-image/Dockerfile) from the same k8s.io/kubernetes module and ldflags as the others;
#   $out/cluster/etcd, etcdctl, etcdutl: etcd $CLUSTER_ETCD_VERSION, the release kubeadm's DefaultEtcdVersion
#   names (registry.k8s.io/etcd is etcd's own release image since cluster/images/etcd left the kubernetes
#   repository), built as etcd's scripts/build_lib.sh builds them (CGO off, -trimpath, GitSHA stamped);
#   $out/cluster/coredns: CoreDNS $COREDNS_VERSION (kubeadm's CoreDNSVersion) from its module root, with
#   the checked-in generated plugin list, as its Makefile builds it (-tags grpcnotrace, -s -w).
#   $out/cluster/metrics-server: metrics-server $METRICS_SERVER_VERSION (for `kubectl top`) from its module's
#   cmd/metrics-server, as its Makefile builds it (CGO off, -trimpath, -w, client-go's version stamped).
#   Version files beside them (cluster/etcd.version, cluster/coredns.version, cluster/metrics-server.version) say
#   what was built.
#   $out/crictl: cri-tools $CRI_TOOLS_VERSION's crictl, as its Makefile builds it (CGO off, -trimpath, the version
#   stamped), for the node's shell (docs/operations.md's minikube guide runs it on the node).
# --csi also builds the CSI sidecars of the hostpath driver deployment upstream's e2e suite uses (images/build.py packs
#   them as registry.k8s.io/sig-storage/<command>:<version>): $out/csi/csi-provisioner, csi-attacher, csi-resizer,
#   csi-snapshotter and csi-snapshot-metadata, each from its own Go module at the tag versions.env pins (CSI_*), as
#   release-tools/build.make builds it (CGO off, -X main.version=<the tag>), with a <command>.version file beside it.
#   hostpathplugin, csi-node-driver-registrar, livenessprobe and csi-external-health-monitor-controller are not built:
#   the Go module proxy serves no version of their modules (see versions.env).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
cache=${KOPFLET_CACHE:-/var/cache/kopflet}
out="$cache/bin/$KUBERNETES_VERSION-etcd-$ETCD_VERSION"
k8s_bins=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
# agnhost: upstream's e2e test image binary (grpc health server, netexec, inclusterclient...), and nnp (the
# nonewprivs image's), from the same k8s.io/kubernetes module; images/build.py packs them into the
# registry.k8s.io/e2e-test-images images, with the files those images' Dockerfiles copy from the module's
# test/images (e2e-images/: agnhost's porter certificate, kitten's and nautilus' pictures).
# sample-device-plugin: upstream's sample device plugin (test/images/sample-device-plugin), for the device plugin
# e2e test (tests/e2e/test_device_plugins.py says what it needs at run time).
test_bins=(agnhost nnp sample-device-plugin)
# --e2e adds sample-apiserver: k8s.io/sample-apiserver $SAMPLE_APISERVER_VERSION, the binary of the e2e image
# sample-apiserver that the [Conformance] Aggregator spec runs (images/build.py packs it when it is built; no test of
# `make test` needs it, and its cold build takes minutes); sample-apiserver.version beside it says what was built.
e2e_bins=()
cluster_bins=()
# --csi: each sidecar as "<command> <Go module> <version>"; the command's main package is <module>/cmd/<command>.
csi_sidecars=(
  "csi-provisioner github.com/kubernetes-csi/external-provisioner/v6 $CSI_PROVISIONER_VERSION"
  "csi-attacher github.com/kubernetes-csi/external-attacher/v4 $CSI_ATTACHER_VERSION"
  "csi-resizer github.com/kubernetes-csi/external-resizer/v2 $CSI_RESIZER_VERSION"
  "csi-snapshotter github.com/kubernetes-csi/external-snapshotter/v8 $CSI_SNAPSHOTTER_VERSION"
  "csi-snapshot-metadata github.com/kubernetes-csi/external-snapshot-metadata $CSI_SNAPSHOT_METADATA_VERSION"
)
csi=0
for arg in "$@"; do
  case $arg in
    --kubelet) k8s_bins+=(kubelet) ;;
    # --kubemark: upstream's hollow node (cmd/kubemark), beside which `kopflet hollow` is measured (issue 24).
    --kubemark) k8s_bins+=(kubemark) ;;
    --e2e) e2e_bins=(e2e.test ginkgo sample-apiserver) ;;
    --cluster)
      k8s_bins+=(kubeadm kube-proxy)
      cluster_bins=(kube-log-runner cluster/etcd cluster/etcdctl cluster/etcdutl cluster/coredns crictl
                    cluster/metrics-server) ;;
    --csi) csi=1 ;;
    *) echo "usage: $0 [--kubelet] [--kubemark] [--e2e] [--cluster] [--csi]" >&2; exit 2 ;;
  esac
done
# csi_fresh NAME VERSION: whether $out/csi holds NAME built from VERSION.
csi_fresh() { [ -x "$out/csi/$1" ] && [ "$(cat "$out/csi/$1.version" 2>/dev/null)" = "$2" ]; }

missing=0
for b in etcd "${k8s_bins[@]}" "${test_bins[@]}" "${e2e_bins[@]}" "${cluster_bins[@]}"; do
  [ -x "$out/$b" ] || missing=1
done
[ -f "$out/e2e-images/.complete" ] || missing=1
if [ "$csi" = 1 ]; then
  for row in "${csi_sidecars[@]}"; do
    read -r name _ version <<< "$row"
    csi_fresh "$name" "$version" || missing=1
  done
fi
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
staging=$(curl -sfL --max-time 60 "$(go env GOPROXY | cut -d, -f1)/k8s.io/kubernetes/@v/$KUBERNETES_VERSION.mod" \
  | sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\1#p')
[ -n "$staging" ] || { echo "could not read the staging module list of k8s.io/kubernetes $KUBERNETES_VERSION" >&2; exit 1; }
# write_gomod DIR MODULE: a module requiring k8s.io/kubernetes, its ./staging replacements (which a
# dependency's go.mod cannot carry) pointed at the staging modules' own releases.
write_gomod() {
  {
    echo "module $2"
    echo "go 1.26"
    echo "require k8s.io/kubernetes $KUBERNETES_VERSION"
    echo "replace ("
    for m in $staging; do echo "	$m => $m $KUBERNETES_STAGING_VERSION"; done
    echo ")"
  } > "$1/go.mod"
}
d="$cache/build/kubernetes-$KUBERNETES_VERSION"; mkdir -p "$d"
write_gomod "$d" kopflet.local/kubernetes
cat > "$d/tools.go" <<'GO'
//go:build tools

// Package tools pins the commands this module builds.
package tools

import (
	_ "k8s.io/component-base/logs/kube-log-runner"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubeadm"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "k8s.io/kubernetes/cmd/kubemark"
	_ "k8s.io/kubernetes/test/images/agnhost"
	_ "k8s.io/kubernetes/test/images/sample-device-plugin"
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
# kube-log-runner lives in the component-base staging module; upstream builds it static with the same flags.
if [ "${#cluster_bins[@]}" -gt 0 ] && [ ! -x "$out/kube-log-runner" ]; then
  echo "building kube-log-runner $KUBERNETES_VERSION ..." >&2
  go build -trimpath -tags tools -ldflags "$ldflags" -o "$out/kube-log-runner.tmp" \
    k8s.io/component-base/logs/kube-log-runner >&2
  mv "$out/kube-log-runner.tmp" "$out/kube-log-runner"
fi
kdir=$(go list -m -f "{{.Dir}}" k8s.io/kubernetes)
# The image tag upstream publishes for this agnhost source, which its Makefile also stamps into the binary
# (-X main.Version): `agnhost --version` answers it. A binary without the stamp is rebuilt.
agnhost_version=$(cat "$kdir/test/images/agnhost/VERSION")
if [ ! -x "$out/agnhost" ] || [ "$("$out/agnhost" --version 2>/dev/null | awk '{print $NF}')" != "$agnhost_version" ]
then
  echo "building agnhost $agnhost_version ($KUBERNETES_VERSION) ..." >&2
  go build -trimpath -tags tools -ldflags "-s -w -X main.Version=$agnhost_version" -o "$out/agnhost.tmp" \
    k8s.io/kubernetes/test/images/agnhost >&2
  echo "$agnhost_version" > "$out/agnhost.version"
  mv "$out/agnhost.tmp" "$out/agnhost"
fi
if [ ! -x "$out/nnp" ]; then
  echo "building nnp $KUBERNETES_VERSION ..." >&2
  go build -trimpath -ldflags "-s -w" -o "$out/nnp.tmp" k8s.io/kubernetes/test/images/nonewprivs >&2
  mv "$out/nnp.tmp" "$out/nnp"
fi
if [ ! -x "$out/sample-device-plugin" ]; then
  echo "building sample-device-plugin $KUBERNETES_VERSION ..." >&2
  go build -trimpath -tags tools -ldflags "-s -w" -o "$out/sample-device-plugin.tmp" \
    k8s.io/kubernetes/test/images/sample-device-plugin >&2
  mv "$out/sample-device-plugin.tmp" "$out/sample-device-plugin"
fi
# A module of its own: the release's k8s.io dependencies (v0.29) are not the stack's. Upstream's
# test/images/sample-apiserver/Makefile checks the tag out, `go mod tidy`, and `CGO_ENABLED=0 go install .`: the module's
# own requirements, no ldflags (its version stamp stays component-base's default, as in upstream's image).
if [ "${#e2e_bins[@]}" -gt 0 ] && { [ ! -x "$out/sample-apiserver" ] \
  || [ "$(cat "$out/sample-apiserver.version" 2>/dev/null)" != "$SAMPLE_APISERVER_VERSION" ]; }; then
  d="$cache/build/sample-apiserver-$SAMPLE_APISERVER_VERSION"; mkdir -p "$d"
  cat > "$d/go.mod" <<GO
module kopflet.local/sample-apiserver
go 1.26
require k8s.io/sample-apiserver $SAMPLE_APISERVER_VERSION
GO
  cat > "$d/tools.go" <<'GO'
//go:build tools

// Package tools pins sample-apiserver's main package (the module root).
package tools

import _ "k8s.io/sample-apiserver"
GO
  (
    cd "$d" && go mod tidy >&2
    echo "building sample-apiserver $SAMPLE_APISERVER_VERSION ..." >&2
    go build -trimpath -tags tools -o "$out/sample-apiserver.tmp" k8s.io/sample-apiserver >&2
    mv "$out/sample-apiserver.tmp" "$out/sample-apiserver"
  )
  echo "$SAMPLE_APISERVER_VERSION" > "$out/sample-apiserver.version"
fi
if [ ! -f "$out/e2e-images/.complete" ]; then
  a="$out/e2e-images"
  rm -rf "$a.tmp" && mkdir -p "$a.tmp/agnhost/porter" "$a.tmp/kitten/html" "$a.tmp/nautilus/html"
  cp "$kdir/test/images/agnhost/porter/localhost.crt" "$kdir/test/images/agnhost/porter/localhost.key" \
    "$a.tmp/agnhost/porter/"
  for p in kitten nautilus; do cp "$kdir/test/images/$p/html/$p.jpg" "$kdir/test/images/$p/html/data.json" \
    "$a.tmp/$p/html/"; done
  chmod -R u+w "$a.tmp" && touch "$a.tmp/.complete" && rm -rf "$a" && mv "$a.tmp" "$a"
fi

# --- e2e.test and ginkgo (--e2e) -------------------------------------------------------------
# A module of its own: the suite's test-only dependencies stay out of the stack binaries' go.sum.
# e2e.test is upstream's test/e2e package compiled with its own e2e_test.go (the framework's flags, every
# test package, the embedded testing-manifests), as upstream's `make WHAT=test/e2e/e2e.test` does; ginkgo is
# built from the same module graph, as upstream builds it from build/tools.go.
if [ "${#e2e_bins[@]}" -gt 0 ] && { [ ! -x "$out/e2e.test" ] || [ ! -x "$out/ginkgo" ]; }; then
  d="$cache/build/e2e-$KUBERNETES_VERSION"; mkdir -p "$d"
  write_gomod "$d" kopflet.local/e2e
  cat > "$d/tools.go" <<'GO'
//go:build tools

// Package tools pins what this module builds: the e2e suite and the ginkgo CLI.
package tools

import (
	_ "github.com/onsi/ginkgo/v2/ginkgo"
	_ "k8s.io/kubernetes/test/e2e"
)
GO
  cd "$d"
  go mod tidy >&2
  if [ ! -x "$out/e2e.test" ]; then
    echo "building e2e.test $KUBERNETES_VERSION ..." >&2
    go test -c -trimpath -ldflags "$ldflags" -o "$out/e2e.test.tmp" k8s.io/kubernetes/test/e2e >&2
    mv "$out/e2e.test.tmp" "$out/e2e.test"
  fi
  if [ ! -x "$out/ginkgo" ]; then
    echo "building ginkgo $(go list -m -f '{{.Version}}' github.com/onsi/ginkgo/v2) ..." >&2
    go build -trimpath -tags tools -ldflags "-s -w" -o "$out/ginkgo.tmp" github.com/onsi/ginkgo/v2/ginkgo >&2
    mv "$out/ginkgo.tmp" "$out/ginkgo"
  fi
fi
# --- the kubeadm cluster's etcd and CoreDNS (--cluster) -------------------------------------------
if [ "${#cluster_bins[@]}" -gt 0 ]; then
  c="$out/cluster"; mkdir -p "$c"
  if [ ! -x "$c/etcd" ] || [ ! -x "$c/etcdctl" ] || [ ! -x "$c/etcdutl" ] \
    || [ "$(cat "$c/etcd.version" 2>/dev/null)" != "$CLUSTER_ETCD_VERSION" ]; then
    d="$cache/build/etcd-cluster-$CLUSTER_ETCD_VERSION"; mkdir -p "$d"
    cat > "$d/go.mod" <<GO
module kopflet.local/etcd-cluster
go 1.26
require (
	go.etcd.io/etcd/etcdctl/v3 $CLUSTER_ETCD_VERSION
	go.etcd.io/etcd/etcdutl/v3 $CLUSTER_ETCD_VERSION
	go.etcd.io/etcd/server/v3 $CLUSTER_ETCD_VERSION
)
GO
    cat > "$d/tools.go" <<'GO'
//go:build tools

// Package tools pins the etcd commands this module builds: each module's root is its main package.
package tools

import (
	_ "go.etcd.io/etcd/etcdctl/v3"
	_ "go.etcd.io/etcd/etcdutl/v3"
	_ "go.etcd.io/etcd/server/v3"
)
GO
    # etcd's build stamps the release commit (git rev-parse --short HEAD) into the api module's GitSHA;
    # the proxy's record of the tag gives that commit.
    sha=$(cd "$d" && go mod download -json "go.etcd.io/etcd/v3@$CLUSTER_ETCD_VERSION" \
      | sed -n 's/.*"Hash": "\([0-9a-f]\{7\}\).*/\1/p')
    (
      cd "$d" && go mod tidy >&2
      for m in server etcdctl etcdutl; do
        b=$m; [ "$m" = server ] && b=etcd
        echo "building $b $CLUSTER_ETCD_VERSION ..." >&2
        go build -trimpath -tags tools -installsuffix=cgo \
          -ldflags "-X=go.etcd.io/etcd/api/v3/version.GitSHA=${sha:-GitNotFound}" \
          -o "$c/$b.tmp" "go.etcd.io/etcd/$m/v3" >&2
        mv "$c/$b.tmp" "$c/$b"
      done
    )
    echo "$CLUSTER_ETCD_VERSION" > "$c/etcd.version"
  fi
  if [ ! -x "$c/coredns" ] || [ "$(cat "$c/coredns.version" 2>/dev/null)" != "$COREDNS_VERSION" ]; then
    d="$cache/build/coredns-$COREDNS_VERSION"; mkdir -p "$d"
    cat > "$d/go.mod" <<GO
module kopflet.local/coredns
go 1.26
require github.com/coredns/coredns $COREDNS_VERSION
GO
    cat > "$d/tools.go" <<'GO'
//go:build tools

// Package tools pins CoreDNS's main package (the module root; its plugins are core/plugin/zplugin.go's).
package tools

import _ "github.com/coredns/coredns"
GO
    (
      cd "$d" && go mod tidy >&2
      echo "building coredns $COREDNS_VERSION ..." >&2
      # Its Makefile: CGO off, -tags grpcnotrace, -s -w, GitCommit from `git describe` (no checkout here: empty).
      go build -trimpath -tags tools,grpcnotrace -ldflags "-s -w -X github.com/coredns/coredns/coremain.GitCommit=" \
        -o "$c/coredns.tmp" github.com/coredns/coredns >&2
      mv "$c/coredns.tmp" "$c/coredns"
    )
    echo "$COREDNS_VERSION" > "$c/coredns.version"
  fi
  if [ ! -x "$c/metrics-server" ] \
    || [ "$(cat "$c/metrics-server.version" 2>/dev/null)" != "$METRICS_SERVER_VERSION" ]; then
    # A module of its own: metrics-server's k8s.io dependencies are of another release than the stack's.
    d="$cache/build/metrics-server-$METRICS_SERVER_VERSION"; mkdir -p "$d"
    cat > "$d/go.mod" <<GO
module kopflet.local/metrics-server
go 1.26.4
require sigs.k8s.io/metrics-server $METRICS_SERVER_VERSION
GO
    cat > "$d/tools.go" <<'GO'
//go:build tools

// Package tools pins metrics-server's main package.
package tools

import _ "sigs.k8s.io/metrics-server/cmd/metrics-server"
GO
    (
      cd "$d"
      # Its Makefile stamps client-go's version: GIT_TAG, GIT_COMMIT and BUILD_DATE. The proxy's record of the
      # tag gives the release time (the build date here, so a rebuild is the same binary) and, when the proxy
      # knows it, the commit.
      info=$(go mod download -json "sigs.k8s.io/metrics-server@$METRICS_SERVER_VERSION")
      sha=$(echo "$info" | sed -n 's/.*"Hash": "\([0-9a-f]\{40\}\)".*/\1/p')
      date=$(sed -n 's/.*"Time": *"\([^"]*\)".*/\1/p' "$(echo "$info" | sed -n 's/.*"Info": "\([^"]*\)".*/\1/p')")
      go mod tidy >&2
      echo "building metrics-server $METRICS_SERVER_VERSION ..." >&2
      pkg=k8s.io/client-go/pkg
      go build -trimpath -tags tools -ldflags "-w -X $pkg/version.gitVersion=$METRICS_SERVER_VERSION \
 -X $pkg/version.gitCommit=$sha -X $pkg/version.buildDate=$date" \
        -o "$c/metrics-server.tmp" sigs.k8s.io/metrics-server/cmd/metrics-server >&2
      mv "$c/metrics-server.tmp" "$c/metrics-server"
    )
    echo "$METRICS_SERVER_VERSION" > "$c/metrics-server.version"
  fi
  if [ ! -x "$out/crictl" ] || [ "$("$out/crictl" --version 2>/dev/null | awk '{print $NF}')" != "$CRI_TOOLS_VERSION" ]
  then
    # A module of its own, as metrics-server's: cri-tools pins its own k8s.io releases.
    d="$cache/build/cri-tools-$CRI_TOOLS_VERSION"; mkdir -p "$d"
    cat > "$d/go.mod" <<GO
module kopflet.local/cri-tools
go 1.26
require sigs.k8s.io/cri-tools $CRI_TOOLS_VERSION
GO
    cat > "$d/tools.go" <<'GO'
//go:build tools

// Package tools pins crictl's main package.
package tools

import _ "sigs.k8s.io/cri-tools/cmd/crictl"
GO
    (
      cd "$d" && go mod tidy >&2
      echo "building crictl $CRI_TOOLS_VERSION ..." >&2
      # Its Makefile: CGO off, -trimpath, -X pkg/version.Version; stamped with the tag, so `crictl --version` says
      # "crictl version v1.37.0" as the released binaries do, and a binary of another release is rebuilt.
      go build -trimpath -tags tools -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$CRI_TOOLS_VERSION" \
        -o "$out/crictl.tmp" sigs.k8s.io/cri-tools/cmd/crictl >&2
      mv "$out/crictl.tmp" "$out/crictl"
    )
  fi
fi
# --- the hostpath driver's CSI sidecars (--csi) ---------------------------------------------------
# Each a module of its own (each sidecar pins its own k8s.io release). Upstream builds a sidecar in its repository, the
# module as the main module: its go.mod's replace directives (the k8s.io staging modules k8s.io/kubernetes needs at
# one release, and a nested client module at ./client) are in force there, but a dependency's are ignored, so this
# module carries them over: a version replacement as it is, a directory (the nested module, which the module's zip
# leaves out) as that module's release of the same tag. The go line is the sidecar's own (GODEBUG defaults follow the
# main module's). release-tools/build.make: `CGO_ENABLED=0 go build -a -ldflags '-X main.version=$(REV)
# -extldflags "-static"'` in cmd/<command>; the release build (prow.sh's gcr_cloud_build) sets REV to the tag, so
# `<command> --version` prints "<command> <tag>" as the released images' binaries do.

# carried_replaces GOMOD VERSION: GOMOD's replace directives as lines of a replace block, a directory replacement made
# the replaced module's release VERSION.
carried_replaces() {
  go mod edit -print "$1" \
    | awk '/^replace \($/ {b = 1; next} b && /^\)$/ {b = 0; next} b {print; next} /^replace / {sub(/^replace /, ""); print}' \
    | while read -r line; do
        [ -n "$line" ] || continue
        old=${line%% => *} new=${line#* => }
        case $new in ./*|../*) new="${old%% *} $2" ;; esac
        echo "	$old => $new"
      done
}
if [ "$csi" = 1 ]; then
  mkdir -p "$out/csi"
  for row in "${csi_sidecars[@]}"; do
    read -r name module version <<< "$row"
    csi_fresh "$name" "$version" && continue
    d="$cache/build/csi-$name-$version"; mkdir -p "$d"
    (
      cd "$d"
      printf 'module kopflet.local/%s\n' "$name" > go.mod  # where `go mod download` runs, until written below
      upstream=$(go mod download -json "$module@$version" | sed -n 's/.*"GoMod": "\([^"]*\)".*/\1/p')
      [ -f "$upstream" ] || { echo "the Go module proxy has no $module $version" >&2; exit 1; }
      gover=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$upstream")
      {
        echo "module kopflet.local/$name"
        echo "go ${gover:-1.26}"
        echo "require $module $version"
        echo "replace ("
        carried_replaces "$upstream" "$version"
        echo ")"
      } > go.mod
      cat > tools.go <<GO
//go:build tools

// Package tools pins $name's main package.
package tools

import _ "$module/cmd/$name"
GO
      go mod tidy >&2
      echo "building $name $version ..." >&2
      go build -trimpath -tags tools -ldflags "-X main.version=$version -extldflags \"-static\"" \
        -o "$out/csi/$name.tmp" "$module/cmd/$name" >&2
      mv "$out/csi/$name.tmp" "$out/csi/$name"
    )
    echo "$version" > "$out/csi/$name.version"
  done
fi
echo "$out"
