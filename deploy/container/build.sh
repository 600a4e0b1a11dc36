#!/usr/bin/env bash
# Builds floe's runtime image from a binary already built, with buildah,
# podman or docker (whichever is found first):
#
#   cargo build --release -p floe
#   deploy/container/build.sh target/release/floe floe:latest
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
binary=${1:-target/release/floe}
tag=${2:-floe:latest}

context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
"$here/rootfs.sh" "$binary" "$context"
cp "$here/Containerfile.prebuilt" "$context/Containerfile"

if command -v buildah >/dev/null; then
  buildah bud --quiet --layers=false -f "$context/Containerfile" -t "$tag" "$context"
elif command -v podman >/dev/null; then
  podman build --quiet -f "$context/Containerfile" -t "$tag" "$context"
else
  docker build --quiet -f "$context/Containerfile" -t "$tag" "$context"
fi
