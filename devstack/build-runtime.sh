#!/usr/bin/env bash
# Build a container runtime that supports pods in user namespaces (hostUsers: false): containerd 2.x
# (`containerd`, `containerd-shim-runc-v2`, `ctr`) and runc, from their Go modules through the Go module
# proxy. Debian bookworm's containerd 1.6 has no user namespace support in its CRI plugin, and its runc 1.1
# no idmapped mounts for them.
# Each module is built as the main module, from a copy of its proxy zip, so its own go.mod/go.sum (and any
# replace directives) hold, as upstream's Makefiles build them. Binaries are cached per version under
# $KOPFLET_CACHE/bin/runtime-containerd-<v>-runc-<v>, so a second run is free; prints that directory.
# Needs gcc and libseccomp-dev (runc's nsenter is cgo, and the seccomp build tag links libseccomp):
# install-deps.sh-style, this script installs libseccomp-dev when missing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
cache=${KOPFLET_CACHE:-/var/cache/kopflet}
out="$cache/bin/runtime-containerd-$CONTAINERD_VERSION-runc-$RUNC_VERSION"
bins=(containerd containerd-shim-runc-v2 ctr runc)

missing=0
for b in "${bins[@]}"; do [ -x "$out/$b" ] || missing=1; done
if [ "$missing" = 0 ]; then echo "$out"; exit 0; fi

if ! dpkg-query -W -f='${Status}' libseccomp-dev 2>/dev/null | grep -q "install ok installed"; then
  echo "installing: libseccomp-dev" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends libseccomp-dev gcc libc6-dev pkg-config >&2
fi

mkdir -p "$out" "$cache/build"
# sum.golang.org is not reachable here; the module proxy is the source of truth.
export GOSUMDB=off GOFLAGS="-mod=mod -buildvcs=false" GOTOOLCHAIN=local
export GOCACHE=${GOCACHE:-$cache/go-build}

# module_src MODULE VERSION DIR: a writable copy of the module's source (the proxy's zip, unpacked by
# `go mod download`), to build it as the main module.
module_src() {
  local src
  src=$(cd /tmp && go mod download -json "$1@$2" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')
  [ -n "$src" ] || { echo "go mod download $1@$2 gave no directory" >&2; exit 1; }
  if [ ! -f "$3/.complete" ]; then
    rm -rf "$3" && cp -r "$src" "$3" && chmod -R u+w "$3" && touch "$3/.complete"
  fi
}

# --- containerd ----------------------------------------------------------------------------------
# As its Makefile builds them: urfave_cli_no_docs; the daemon with cgo off (no btrfs: its snapshotter
# needs btrfs headers), the shim static with no_grpc. Version stamped as `make VERSION=... REVISION=...`.
d="$cache/build/containerd-$CONTAINERD_VERSION"
module_src github.com/containerd/containerd/v2 "$CONTAINERD_VERSION" "$d"
pkg=github.com/containerd/containerd/v2
ld="-s -w -X $pkg/version.Version=$CONTAINERD_VERSION -X $pkg/version.Revision=$CONTAINERD_VERSION \
 -X $pkg/version.Package=$pkg"
for b in containerd ctr; do
  [ -x "$out/$b" ] && continue
  echo "building $b $CONTAINERD_VERSION ..." >&2
  (cd "$d" && CGO_ENABLED=0 go build -trimpath -tags "urfave_cli_no_docs no_btrfs" -ldflags "$ld" \
    -o "$out/$b.tmp" "./cmd/$b" >&2)
  mv "$out/$b.tmp" "$out/$b"
done
if [ ! -x "$out/containerd-shim-runc-v2" ]; then
  echo "building containerd-shim-runc-v2 $CONTAINERD_VERSION ..." >&2
  (cd "$d" && CGO_ENABLED=0 go build -trimpath -tags "urfave_cli_no_docs no_btrfs no_grpc" -ldflags "$ld" \
    -o "$out/containerd-shim-runc-v2.tmp" ./cmd/containerd-shim-runc-v2 >&2)
  mv "$out/containerd-shim-runc-v2.tmp" "$out/containerd-shim-runc-v2"
fi

# --- runc ----------------------------------------------------------------------------------------
# As `make RUNC_BUILDTAGS=-libpathrs` builds it: seccomp (libseccomp through pkg-config), a PIE, cgo on
# for libcontainer/nsenter. libpathrs (a Rust C library) is not packaged in Debian bookworm; without the
# tag runc uses its pure-Go path resolution, as runc <= 1.4 always did.
if [ ! -x "$out/runc" ]; then
  d="$cache/build/runc-$RUNC_VERSION"
  module_src github.com/opencontainers/runc "$RUNC_VERSION" "$d"
  echo "building runc $RUNC_VERSION ..." >&2
  (cd "$d" && CGO_ENABLED=1 go build -trimpath -buildmode=pie -tags "seccomp urfave_cli_no_docs" \
    -ldflags "-X main.gitCommit=$RUNC_VERSION" -o "$out/runc.tmp" . >&2)
  mv "$out/runc.tmp" "$out/runc"
fi
echo "$out"
