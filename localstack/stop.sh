#!/usr/bin/env bash
# Stops the server localstack/start.sh started with the same STATE_DIR (or port).
set -euo pipefail
state=${1:-${TMPDIR:-/tmp}/floe-s3-9000}
[ -f "$state/pid" ] && kill "$(cat "$state/pid")" 2>/dev/null || true
rm -f "$state/pid"
