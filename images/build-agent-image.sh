#!/usr/bin/env bash
# Build kopflet's own image (Containerfile) with buildah, here where there is no Docker engine and no
# Docker Hub: the base, docker.io/library/debian:bookworm-slim, is made the way Debian's official image is
# (debootstrap of bookworm, minbase variant, slimmed), cached, and committed into buildah's local store under
# that name, so that `buildah bud` runs the Containerfile unchanged without pulling anything (--pull-never).
# When the local registry answers, the base is also pushed there (for containerd's docker.io mirror); it
# need not be up.
#
# Usage: bash images/build-agent-image.sh [--import]  (--import also loads it into the stack's containerd)
# Output: localhost/kopflet:<version> in buildah's store, and /var/cache/kopflet/images/kopflet-<version>.tar
# Environment: KOPFLET_CACHE (/var/cache/kopflet), KOPFLET_REGISTRY (127.0.0.1:5050, the stack's; empty: never push),
#   KOPFLET_DEBIAN_MIRROR (http://deb.debian.org/debian), KOPFLET_BUILD_CA (the CA bundle pip trusts during
#   the build, /etc/ssl/certs/ca-certificates.crt; empty: the image's own), KOPFLET_REBUILD_BASE=1 (commit
#   the base again from the cached root; remove /var/cache/kopflet/images/debian-bookworm-rootfs for a fresh
#   debootstrap with today's updates).
# Idempotent: a second run reuses the debootstrap root, the base image and buildah's layer cache.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
cache=${KOPFLET_CACHE:-/var/cache/kopflet}/images
registry=${KOPFLET_REGISTRY-127.0.0.1:5050}
mirror=${KOPFLET_DEBIAN_MIRROR:-http://deb.debian.org/debian}
build_ca=${KOPFLET_BUILD_CA-/etc/ssl/certs/ca-certificates.crt}
version=$(sed -n 's/^version *= *//p' "$repo/setup.cfg")
image=localhost/kopflet:$version
base=docker.io/library/debian:bookworm-slim
rootfs=$cache/debian-bookworm-rootfs
archive=$cache/kopflet-$version.tar
mkdir -p "$cache"
log() { echo "build-agent-image: $*" >&2; }

# --- the tools -----------------------------------------------------------------------------------
missing=()
for tool in buildah debootstrap; do
  command -v "$tool" >/dev/null || missing+=("$tool")
done
if [ "${#missing[@]}" -gt 0 ]; then
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # No package lists yet (a fresh machine or a slim image), or stale ones (404 on the .debs): update first.
  if ! compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null; then
    apt-get update -qq >&2
  fi
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2 \
    || { apt-get update -qq >&2 && apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2; }
fi

# --- the base ------------------------------------------------------------------------------------
# The root file system, once: debootstrap into a temporary directory and move it in place only when
# complete, so an interrupted run never leaves a half-made root that looks cached.
if [ ! -d "$rootfs" ]; then
  log "debootstrap bookworm (minbase) from $mirror ..."
  rm -rf "$rootfs.tmp"
  debootstrap --variant=minbase bookworm "$rootfs.tmp" "$mirror" >&2
  r=$rootfs.tmp
  # As debuerreotype's slim images (the official debian:bookworm-slim): apt with bookworm, bookworm-updates
  # and bookworm-security (debootstrap writes only bookworm), apt cleaning up after itself in image layers,
  # dpkg leaving out documentation, man pages and locales, and no host files, logs or .debs.
  rm -f "$r/etc/apt/sources.list"
  cat > "$r/etc/apt/sources.list.d/debian.sources" <<'EOF'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  cat > "$r/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
  echo 'Acquire::Languages "none";' > "$r/etc/apt/apt.conf.d/docker-no-languages"
  printf '%s\n' 'Acquire::GzipIndexes "true";' 'Acquire::CompressionTypes::Order:: "gz";' \
    > "$r/etc/apt/apt.conf.d/docker-gzip-indexes"
  echo 'Apt::AutoRemove::SuggestsImportant "false";' > "$r/etc/apt/apt.conf.d/docker-autoremove-suggests"
  cat > "$r/etc/dpkg/dpkg.cfg.d/docker" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
EOF
  # The updates and security fixes since the point release, as the official image has them (the Containerfile's
  # `apt-get install` would not upgrade what the base already holds). debootstrap's resolv.conf is still there.
  chroot "$r" apt-get update -qq >&2
  chroot "$r" env DEBIAN_FRONTEND=noninteractive apt-get upgrade -y -qq >&2
  if [ -d "$r/usr/share/doc" ]; then
    find "$r/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
    find "$r/usr/share/doc" -mindepth 1 -type d -empty -delete
  fi
  if [ -d "$r/usr/share/locale" ]; then
    find "$r/usr/share/locale" -mindepth 1 -maxdepth 1 -not -name locale.alias -exec rm -rf {} +
  fi
  rm -rf "$r"/usr/share/{man,groff,info,lintian,linda}/* \
         "$r"/var/lib/apt/lists/* "$r"/var/cache/apt/archives/*.deb "$r"/var/cache/apt/*.bin \
         "$r"/var/cache/ldconfig/aux-cache "$r"/var/log/*.log "$r"/var/log/apt/* \
         "$r"/etc/resolv.conf "$r"/etc/hostname
  mv "$r" "$rootfs"
fi

# The image, once per buildah store (buildah's own storage, /var/lib/containers for root).
made_base=
if [ "${KOPFLET_REBUILD_BASE:-}" = 1 ] || ! buildah inspect --type image "$base" >/dev/null 2>&1; then
  log "committing $base from $rootfs ..."
  ctr=$(buildah from --pull-never scratch)
  mnt=$(buildah mount "$ctr")
  cp -a "$rootfs"/. "$mnt"/
  buildah umount "$ctr" >/dev/null
  buildah config --cmd '["bash"]' --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$ctr"
  buildah commit --quiet --rm "$ctr" "$base" >/dev/null
  made_base=1
fi

# Optionally, the local registry: only when it answers, and only when it lacks the base or the base is new.
# A failed push is a warning: nothing below needs the registry.
if [ -n "$registry" ] && command -v curl >/dev/null \
   && curl -fsS -m 3 -o /dev/null "http://$registry/v2/" 2>/dev/null; then
  if [ -n "$made_base" ] || ! curl -fsS -m 5 -o /dev/null -I \
       -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
       -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' \
       "http://$registry/v2/library/debian/manifests/bookworm-slim" 2>/dev/null; then
    log "pushing $base to $registry ..."
    buildah push --quiet --tls-verify=false "$base" "docker://$registry/library/debian:bookworm-slim" >&2 \
      || log "warning: could not push the base to $registry (not needed for this build)"
  fi
else
  log "registry ${registry:-(none)} not answering: the base stays in buildah's local store only"
fi

# --- the agent -----------------------------------------------------------------------------------
# --layers: buildah's layer cache (off by default in bud), so an unchanged rerun takes seconds.
# --pull-never: the base is the local one above; docker.io is never contacted.
# Machines whose HTTPS goes through an intercepting proxy (this one) need their CA for pip inside the build:
# the RUN steps get a throwaway home in place of /root (which the base has, so buildah leaves no mount
# point behind) with a user pip.conf naming a copy of the host's CA bundle. Bind mounts are no part of the
# layers: the image keeps Debian's ca-certificates and no pip.conf, and the Containerfile stays unchanged.
build_home=()
if [ -n "$build_ca" ] && [ -r "$build_ca" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  mkdir -p "$tmp/.config/pip"
  cp "$build_ca" "$tmp/.config/pip/build-ca.crt"
  printf '[global]\ncert = /root/.config/pip/build-ca.crt\n' > "$tmp/.config/pip/pip.conf"
  build_home=(-v "$tmp:/root")
fi
log "buildah bud $image ..."
buildah bud --quiet --layers --pull-never --isolation chroot --network host "${build_home[@]}" \
  -f "$repo/Containerfile" -t "$image" "$repo" >&2

# The docker-archive, rewritten only when the image changed.
id=$(buildah inspect --type image --format '{{.FromImageID}}' "$image")
if [ ! -s "$archive" ] || [ "$(cat "$archive.id" 2>/dev/null)" != "$id" ]; then
  rm -f "$archive" "$archive.id"
  buildah push --quiet "$image" "docker-archive:$archive.tmp:$image" >&2
  mv "$archive.tmp" "$archive"
  echo "$id" > "$archive.id"
fi
echo "$archive"
if [ "${1:-}" = "--import" ]; then
  ctr --address "${KOPFLET_CONTAINERD_SOCKET:-/run/kopflet/containerd/containerd.sock}" -n k8s.io images import \
    "$archive" >&2
fi
