#!/usr/bin/env bash
# Builds the base image every Steady image starts FROM, localhost/debian:bookworm: a minimal Debian 12
# root file system made by mmdebstrap from the apt sources this host already uses (no registry is
# needed, and no mirror name is written into the repository), imported into podman. Idempotent: an
# existing image is reused (podman rmi localhost/debian:bookworm to rebuild it).
# Usage: docker/base.sh   (podman, mmdebstrap: scripts/install-deps.sh)
set -euo pipefail
cd "$(dirname "$0")"
export CONTAINERS_CONF=${CONTAINERS_CONF:-$PWD/containers.conf}
image=localhost/debian:bookworm
if podman image exists "$image"; then
  echo "base.sh: $image exists"
  exit 0
fi
sources=/etc/apt/sources.list.d/debian.sources
[ -f "$sources" ] || sources=/etc/apt/sources.list
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# No manuals, documentation or translations (the licences stay): a smaller base for every image.
mmdebstrap --variant=minbase --quiet \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-exclude=/usr/share/info/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  bookworm "$work/rootfs.tar" "$sources"
podman import --quiet --change 'CMD ["/bin/bash"]' "$work/rootfs.tar" "$image" > /dev/null
echo "base.sh: built $image ($(podman image inspect --format '{{.Size}}' "$image" | awk '{printf "%.0f MB", $1 / 1e6}'))"
