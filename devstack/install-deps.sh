#!/usr/bin/env bash
# Install the Debian packages the local stack and the tests need (idempotent, quick when present).
# Runs as root on a fresh machine of this project's kind; nothing is fetched from outside the
# package registries.
set -euo pipefail
packages=(
  containerd runc containernetworking-plugins iptables   # the container runtime and pod network
  docker-registry skopeo apache2-utils                    # the local image registries (htpasswd) and pushing
  gcc libc6-dev make debian-archive-keyring               # the images: pause's C, busybox from source, Debian's debs
  openssl curl iproute2 procps util-linux                 # certificates, health checks, process tools
  dbus-daemon systemd                                     # graceful node shutdown tests: a private bus, real logind
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "installing: ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi
# Debian enables these services on install where an init system runs; the stack runs its own
# instances with its own configuration, so stop and disable the packaged ones if they started.
for svc in containerd docker-registry; do
  if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet "$svc" 2>/dev/null; then
    systemctl disable --now "$svc" >/dev/null 2>&1 || true
  fi
done
