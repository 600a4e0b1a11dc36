#!/usr/bin/env bash
# Stops the server localstack/start.sh started with the same STATE_DIR (or port).
set -euo pipefail
state=${1:-${TMPDIR:-/tmp}/floe-s3-9000}
[ -f "$state/started" ] || exit 0
read -r kind what <"$state/started" || true
case "$kind" in
  pid)
    kill "$what" 2>/dev/null || true
    # Gone before the port is used again.
    for _ in $(seq 1 50); do kill -0 "$what" 2>/dev/null || break; sleep 0.1; done
    ;;
  container) docker rm -f "$what" >/dev/null 2>&1 || true ;;
  # The LocalStack CLI starts one container per machine: this stops it.
  localstack) localstack stop >/dev/null 2>&1 || true ;;
esac
rm -f "$state/started"
