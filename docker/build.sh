#!/usr/bin/env bash
# Builds every Steady image from docker/Containerfile on the local base (docker/base.sh first):
# localhost/steady-{server,gateway,redis,nginx,prometheus}. The build stage is shared, so the code
# compiles once. Prints each image's size. Usage: docker/build.sh   (from anywhere)
set -euo pipefail
cd "$(dirname "$0")/.."
export CONTAINERS_CONF=${CONTAINERS_CONF:-$PWD/docker/containers.conf}
bash docker/base.sh
start=$(date +%s)
# The build stage is tagged, so its layers stay the cache of the next build; stale layers are pruned.
podman build --quiet --format docker -f docker/Containerfile --target build -t localhost/steady-build . > /dev/null
for target in server gateway redis nginx prometheus; do
  # --format docker: the OCI format has no HEALTHCHECK.
  podman build --quiet --format docker -f docker/Containerfile --target "$target" -t "localhost/steady-$target" . \
    > /dev/null
  echo "build.sh: localhost/steady-$target $(podman image inspect --format '{{.Size}}' "localhost/steady-$target" |
    awk '{printf "%.0f MB", $1 / 1e6}')"
done
podman image prune -f > /dev/null
echo "build.sh: images built in $(($(date +%s) - start)) s"
